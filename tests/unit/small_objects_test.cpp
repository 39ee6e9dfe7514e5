// The pool of small objects that cross threads (a task's record and lists,
// a request's reply slot): blocks made on one thread and freed on another
// stay intact and aligned, what is built with SmallObjectAllocator takes
// nothing from the heap, and a bad free is reported without harm.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <new>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/allocator/small_objects.hpp"
#include "heap_counting.hpp"

namespace {

using ferry::test::counting;
using ferry::test::heap_allocations;
using ferry::small_object_allocate;
using ferry::small_object_deallocate;
using ferry::SmallObjectAllocator;

struct Block {
  std::byte* ptr;
  std::size_t bytes;
  std::size_t alignment;
};

std::byte pattern(std::size_t block, std::size_t i) { return static_cast<std::byte>((block * 131 + i * 7) & 0xff); }

TEST(SmallObjects, MadeOnOneThreadFreedOnAnother) {
  const std::size_t sizes[] = {8, 24, 40, 64, 96, 200, 512, 1000, 4096, 9000, 65536};
  const std::size_t alignments[] = {8, 16, 64};
  for (int round = 0; round < 3; ++round) {
    std::vector<Block> blocks;
    std::thread maker([&] {
      for (std::size_t n = 0; n < 3000; ++n) {
        const std::size_t bytes = sizes[n % std::size(sizes)], alignment = alignments[n % std::size(alignments)];
        auto* p = static_cast<std::byte*>(small_object_allocate(bytes, alignment));
        for (std::size_t i = 0; i < bytes; ++i) p[i] = pattern(n, i);
        blocks.push_back({p, bytes, alignment});
      }
    });
    maker.join();
    std::set<std::byte*> live;
    for (const Block& b : blocks) EXPECT_TRUE(live.insert(b.ptr).second) << "one block handed out twice";
    std::thread freer([&] {
      for (std::size_t n = 0; n < blocks.size(); ++n) {
        const Block& b = blocks[n];
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.ptr) % b.alignment, 0u) << b.bytes << " bytes";
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < b.bytes; ++i) wrong += b.ptr[i] != pattern(n, i);
        EXPECT_EQ(wrong, 0u) << "block " << n << " of " << b.bytes << " bytes was overwritten";
        small_object_deallocate(b.ptr, b.bytes);
      }
    });
    freer.join();
  }
}

TEST(SmallObjects, WhatIsBuiltWithTheAllocatorTakesNothingFromTheHeap) {
  struct Slot {
    std::promise<int> reply{std::allocator_arg, SmallObjectAllocator<char>{}};
    std::vector<std::uint64_t, SmallObjectAllocator<std::uint64_t>> ids;
  };
  using Map = std::unordered_map<std::uint64_t, std::shared_ptr<Slot>, std::hash<std::uint64_t>,
                                 std::equal_to<std::uint64_t>,
                                 SmallObjectAllocator<std::pair<const std::uint64_t, std::shared_ptr<Slot>>>>;
  Map slots;
  std::vector<std::future<int>> futures;
  futures.reserve(500);
  const auto fill = [&] {
    for (std::uint64_t id = 0; id < 500; ++id) {
      auto slot = std::allocate_shared<Slot>(SmallObjectAllocator<Slot>{});
      slot->ids.assign(3, id);
      futures.push_back(slot->reply.get_future());
      slots.emplace(id, std::move(slot));
    }
  };
  // First without counting: the pool's own bookkeeping (its slabs' spans)
  // grows on the heap while it is new.
  fill();
  slots.clear();
  futures.clear();
  heap_allocations.store(0);
  counting.store(true);
  fill();  // five blocks per slot from the pool (2,500 heap allocations with std::allocator)
  counting.store(false);
  // The pool's bookkeeping may still grow by a span or two.
  EXPECT_LE(heap_allocations.load(), 5) << "slots, their promises' state, lists and map nodes come from the pool";

  // Answered and freed on another thread, as replies are.
  std::thread progress([&] {
    for (auto& [id, slot] : slots) slot->reply.set_value(static_cast<int>(id) * 2);
    slots.clear();
  });
  progress.join();
  for (std::size_t id = 0; id < futures.size(); ++id) EXPECT_EQ(futures[id].get(), static_cast<int>(id) * 2);
}

TEST(SmallObjects, ABlockFreedTwiceIsReportedAndThePoolGoesOn) {
  void* p = small_object_allocate(48, 8);
  small_object_deallocate(p, 48);
  small_object_deallocate(p, 48);  // logged ("freed twice?"), not thrown out of a noexcept free
  std::vector<void*> more;
  for (int i = 0; i < 100; ++i) more.push_back(small_object_allocate(48, 8));
  std::set<void*> distinct(more.begin(), more.end());
  EXPECT_EQ(distinct.size(), more.size()) << "the double free left a block in the pool twice";
  for (void* q : more) small_object_deallocate(q, 48);
}

}  // namespace
