#include "page_map.hpp"

#include <fmt/format.h>

#include "ferry/error.hpp"

namespace ferry::detail {

PageMap::~PageMap() {
  for (auto& slot : root_) {
    Mid* mid = slot.load(std::memory_order_relaxed);
    if (mid == nullptr) continue;
    for (auto& leaf : mid->leaves) delete leaf.load(std::memory_order_relaxed);
    delete mid;
  }
}

PageMap::Leaf& PageMap::leaf_for(std::uintptr_t page) {
  if ((page >> (3 * kBits)) != 0)
    throw Error(fmt::format("address {:#x} lies beyond the 48-bit range the pool's page map covers", page << 12));
  auto& mid_slot = root_[page >> (2 * kBits)];
  Mid* mid = mid_slot.load(std::memory_order_relaxed);
  if (mid == nullptr) {
    mid = new Mid();  // value-initialised: every atomic starts null
    mid_slot.store(mid, std::memory_order_release);
  }
  auto& leaf_slot = mid->leaves[(page >> kBits) & kMask];
  Leaf* leaf = leaf_slot.load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    leaf = new Leaf();
    leaf_slot.store(leaf, std::memory_order_release);
  }
  return *leaf;
}

void PageMap::set(std::uintptr_t page, Span* span) {
  leaf_for(page).spans[page & kMask].store(span, std::memory_order_release);
}

void PageMap::set_range(std::uintptr_t first_page, std::size_t pages, Span* span) {
  for (std::uintptr_t page = first_page; page < first_page + pages; ++page) set(page, span);
}

}  // namespace ferry::detail
