// What a pool does with a pointer it did not hand out, one freed twice, one
// pointing inside a block, or a size larger than the block.
#pragma once

namespace ferry {

enum class OnInvalidFree {
  build_default,  // throw in debug builds of Ferry, log in release builds
  throw_error,    // throw UsageError
  log_error,      // log an error and leave the pool untouched
};

// Resolves build_default by how Ferry itself was built, not the caller.
bool throws_on_invalid_free(OnInvalidFree policy) noexcept;

}  // namespace ferry
