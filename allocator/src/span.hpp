// The pool's bookkeeping, kept beside the memory it describes (never inside
// it: the memory may be device-visible or managed). A span is a run of whole
// pages inside one slab: free, one large block, or a run of equal small blocks.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>

#include "ferry/allocator/slab.hpp"

namespace ferry::detail {

inline constexpr unsigned kPageShift = 12;
inline constexpr std::size_t kPageBytes = std::size_t{1} << kPageShift;
inline constexpr unsigned kMinClassShift = 6;   // 64 B
inline constexpr unsigned kMaxClassShift = 16;  // 64 KiB
inline constexpr unsigned kClasses = kMaxClassShift - kMinClassShift + 1;
inline constexpr std::size_t kMaxSmallBytes = std::size_t{1} << kMaxClassShift;
// A run holds at most 1024 blocks (64 KiB of 64 B blocks), so its bitmaps are 16 words.
inline constexpr std::size_t kRunWords = 16;

// Power-of-two classes: a block of class c is aligned to its own size, so
// any alignment up to 64 KiB is met by picking the class.
inline unsigned size_class(std::size_t bytes) noexcept {
  const unsigned shift = static_cast<unsigned>(std::bit_width(bytes - 1));
  return shift <= kMinClassShift ? 0 : shift - kMinClassShift;
}
inline unsigned class_shift(unsigned cls) noexcept { return cls + kMinClassShift; }
inline std::size_t run_bytes(unsigned cls) noexcept {
  return std::max<std::size_t>(std::size_t{64} << 10, std::size_t{16} << class_shift(cls));
}

enum class SpanState : std::uint8_t { unused, free, large, run };

struct SlabRecord {
  Slab slab;
  std::uintptr_t first_page = 0;
  std::size_t pages = 0;
  bool dedicated = false;  // made for one oversized block; returned when it is freed
};

struct Span {
  // Read without the lock by the free fast path, hence atomic; written under it.
  std::atomic<SpanState> state{SpanState::unused};
  std::atomic<std::uintptr_t> start{0};
  std::atomic<std::uint32_t> block_shift{0};
  std::atomic<std::uint32_t> blocks{0};
  // Which blocks users hold: set on allocate, cleared on free, so a second
  // free of the same block is seen without any lock.
  std::atomic<std::uint64_t> owned[kRunWords] = {};

  // Under the pool's lock.
  std::size_t pages = 0;
  SlabRecord* slab = nullptr;
  unsigned cls = 0;
  std::uint32_t taken_count = 0;            // blocks out of the central store
  std::uint64_t taken[kRunWords] = {};      // users' blocks and those parked in thread caches
  std::multimap<std::size_t, Span*>::iterator free_pos;  // valid while state == free
  Span* prev = nullptr;                     // the class's list of runs with free blocks,
  Span* next = nullptr;                     // or the list of unused span records
  bool listed = false;

  std::uintptr_t first_page() const noexcept { return start.load(std::memory_order_relaxed) >> kPageShift; }
  std::uintptr_t last_page() const noexcept { return first_page() + pages - 1; }
};

struct CachedBlock {
  void* ptr = nullptr;
  Span* span = nullptr;
};

}  // namespace ferry::detail
