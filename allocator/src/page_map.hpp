// Maps 4 KiB page numbers to the span that covers them, so a free can find
// its block's bookkeeping from the pointer alone. Reads are lock-free (the
// free fast path); writes happen under the pool's lock. A three-level radix
// tree over 48-bit addresses: nodes appear on demand and live as long as the map.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry::detail {

struct Span;

class PageMap {
 public:
  PageMap() = default;
  PageMap(const PageMap&) = delete;
  PageMap& operator=(const PageMap&) = delete;
  ~PageMap();

  Span* get(std::uintptr_t page) const noexcept {
    if ((page >> (3 * kBits)) != 0) return nullptr;
    const Mid* mid = root_[page >> (2 * kBits)].load(std::memory_order_acquire);
    if (mid == nullptr) return nullptr;
    const Leaf* leaf = mid->leaves[(page >> kBits) & kMask].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    return leaf->spans[page & kMask].load(std::memory_order_acquire);
  }

  // Throws std::bad_alloc when a node cannot be made, ferry::Error for an
  // address beyond 48 bits.
  void set(std::uintptr_t page, Span* span);
  void set_range(std::uintptr_t first_page, std::size_t pages, Span* span);

 private:
  static constexpr unsigned kBits = 12;
  static constexpr std::uintptr_t kFanout = std::uintptr_t{1} << kBits;
  static constexpr std::uintptr_t kMask = kFanout - 1;

  struct Leaf {
    std::atomic<Span*> spans[kFanout];
  };
  struct Mid {
    std::atomic<Leaf*> leaves[kFanout];
  };

  Leaf& leaf_for(std::uintptr_t page);

  std::atomic<Mid*> root_[kFanout] = {};
};

}  // namespace ferry::detail
