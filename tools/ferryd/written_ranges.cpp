#include "written_ranges.hpp"

#include <algorithm>
#include <cstring>

namespace ferry::ferryd {

void WrittenRanges::add(std::uint64_t offset, std::uint64_t length) {
  if (length == 0) return;
  std::uint64_t start = offset, end = std::min(offset + length, bytes_);
  // Merge with every range that overlaps or touches [start, end).
  auto it = ranges_.upper_bound(start);
  if (it != ranges_.begin() && std::prev(it)->second >= start) --it;
  while (it != ranges_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(start, end);
}

std::uint64_t WrittenRanges::zero_unwritten(std::byte* memory, std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t end = std::min(offset + length, bytes_);
  if (offset >= end || all_written()) return 0;
  std::uint64_t zeroed = 0;
  std::uint64_t at = offset;
  auto it = ranges_.upper_bound(offset);
  if (it != ranges_.begin() && std::prev(it)->second > offset) --it;
  for (; at < end; ++it) {
    const std::uint64_t gap_end = it == ranges_.end() ? end : std::min(it->first, end);
    if (gap_end > at) {
      std::memset(memory + at, 0, gap_end - at);
      zeroed += gap_end - at;
    }
    if (it == ranges_.end()) break;
    at = std::max(at, it->second);
  }
  add(offset, end - offset);
  return zeroed;
}

}  // namespace ferry::ferryd
