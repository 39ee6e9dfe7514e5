#include "ferry/allocator/invalid_free.hpp"

namespace ferry {

bool throws_on_invalid_free(OnInvalidFree policy) noexcept {
  switch (policy) {
    case OnInvalidFree::throw_error: return true;
    case OnInvalidFree::log_error: return false;
    case OnInvalidFree::build_default: break;
  }
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

}  // namespace ferry
