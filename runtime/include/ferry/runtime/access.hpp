// How a task uses a buffer. Dependencies between tasks are inferred from
// these, in submission order: read-after-write, write-after-read, write-after-write.
#pragma once

#include <cstdint>

namespace ferry {

enum class AccessMode : std::uint8_t { read, write, readwrite };

const char* to_string(AccessMode mode) noexcept;
inline bool reads(AccessMode mode) noexcept { return mode != AccessMode::write; }
inline bool writes(AccessMode mode) noexcept { return mode != AccessMode::read; }

}  // namespace ferry
