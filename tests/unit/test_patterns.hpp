// Fill a block with a pattern unique to its owner and check it before the
// block is freed: any overlap between two live blocks breaks a pattern.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::testing {

inline void fill_pattern(void* ptr, std::size_t bytes, std::uint64_t tag) {
  auto* p = static_cast<unsigned char*>(ptr);
  std::size_t i = 0;
  for (; i + sizeof(tag) <= bytes; i += sizeof(tag)) {
    const std::uint64_t value = tag ^ i;
    std::memcpy(p + i, &value, sizeof(value));
  }
  for (; i < bytes; ++i) p[i] = static_cast<unsigned char>(tag ^ i);
}

inline bool check_pattern(const void* ptr, std::size_t bytes, std::uint64_t tag) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  std::size_t i = 0;
  for (; i + sizeof(tag) <= bytes; i += sizeof(tag)) {
    std::uint64_t value;
    std::memcpy(&value, p + i, sizeof(value));
    if (value != (tag ^ i)) return false;
  }
  for (; i < bytes; ++i)
    if (p[i] != static_cast<unsigned char>(tag ^ i)) return false;
  return true;
}

}  // namespace ferry::testing
