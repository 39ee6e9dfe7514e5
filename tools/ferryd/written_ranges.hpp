// Which bytes of a replica its client has written. A replica's memory comes
// from pools that other clients used before, and is not zeroed when made
// (a put usually overwrites it whole, and zeroing first would double the
// memory traffic), so bytes no put or task wrote would show another
// client's data. Before anything reads a replica (a get, a task), the bytes
// not yet written are zeroed: reading them gives zeros, never what was
// there before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace ferry::ferryd {

class WrittenRanges {
 public:
  explicit WrittenRanges(std::uint64_t bytes) : bytes_(bytes) {}

  // [offset, offset + length) now holds the client's bytes.
  void add(std::uint64_t offset, std::uint64_t length);
  // Zeroes what is unwritten in [offset, offset + length) of `memory` (the
  // replica's bytes) and counts it written. Returns the bytes zeroed.
  std::uint64_t zero_unwritten(std::byte* memory, std::uint64_t offset, std::uint64_t length);
  std::uint64_t zero_unwritten(std::byte* memory) { return zero_unwritten(memory, 0, bytes_); }
  bool all_written() const { return ranges_.size() == 1 && ranges_.begin()->first == 0 && ranges_.begin()->second == bytes_; }

  // A client writing every other byte would otherwise make ferryd keep a
  // node per put outside its quota: past this many ranges, the gaps are
  // zeroed at once (by zero_unwritten, which the caller runs when told).
  static constexpr std::size_t max_ranges = 1024;
  bool too_fragmented() const { return ranges_.size() > max_ranges; }

 private:
  std::uint64_t bytes_;
  std::map<std::uint64_t, std::uint64_t> ranges_;  // start -> end, disjoint, not touching
};

}  // namespace ferry::ferryd
