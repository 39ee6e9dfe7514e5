// Behaviour specific to SlabPool / PinnedPool: classes, reuse, coalescing,
// slab lifecycle and observers, thread caches, invalid frees.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/error.hpp"
#include "test_patterns.hpp"

namespace {

using ferry::SlabPool;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

std::unique_ptr<SlabPool> make_pool(std::size_t slab_bytes, ferry::OnInvalidFree policy = ferry::OnInvalidFree::throw_error,
                                    bool thread_cache = true) {
  SlabPool::Options options;
  options.slab_bytes = slab_bytes;
  options.on_invalid_free = policy;
  options.thread_cache = thread_cache;
  return std::make_unique<SlabPool>(ferry::make_mmap_source(false), options);
}

class CountingObserver : public ferry::SlabObserver {
 public:
  void on_slab_added(const ferry::Slab& slab) override {
    std::lock_guard lock(mutex);
    ++added[slab.base];
    EXPECT_GT(slab.bytes, 0u);
  }
  void on_slab_removed(const ferry::Slab& slab) override {
    std::lock_guard lock(mutex);
    ++removed[slab.base];
    EXPECT_EQ(added[slab.base], removed[slab.base]) << "removed a slab that was not added";
  }
  std::size_t total(const std::map<void*, int>& counts) const {
    std::size_t n = 0;
    for (auto [base, count] : counts) n += static_cast<std::size_t>(count);
    return n;
  }
  std::mutex mutex;
  std::map<void*, int> added, removed;
};

TEST(SlabPool, EverySizeClassIsAlignedToItsSize) {
  auto pool = make_pool(4 * MiB);
  for (std::size_t cls = 64; cls <= SlabPool::max_small_bytes; cls *= 2) {
    std::vector<void*> blocks;
    for (int i = 0; i < 20; ++i) {
      void* p = pool->allocate(cls, 1);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % cls, 0u) << "class " << cls;
      EXPECT_EQ(pool->block_bytes(p), cls);
      blocks.push_back(p);
    }
    // A size just above a class goes to the next one.
    void* bigger = pool->allocate(cls + 1, 1);
    EXPECT_EQ(pool->block_bytes(bigger), cls == SlabPool::max_small_bytes ? cls + 4 * KiB : cls * 2);
    pool->deallocate(bigger, cls + 1);
    for (void* p : blocks) pool->deallocate(p, cls);
  }
}

TEST(SlabPool, LargeBlocksArePageGranularAndAligned) {
  auto pool = make_pool(4 * MiB);
  void* p = pool->allocate(100 * KiB + 1);
  EXPECT_EQ(pool->block_bytes(p), 104 * KiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % SlabPool::page_bytes, 0u);
  void* q = pool->allocate(200 * KiB, 1 * MiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % MiB, 0u);
  pool->deallocate(q, 200 * KiB);
  pool->deallocate(p, 100 * KiB + 1);
}

TEST(SlabPool, ReusesFreedBlocks) {
  auto pool = make_pool(4 * MiB);
  void* small = pool->allocate(100);
  pool->deallocate(small, 100);
  EXPECT_EQ(pool->allocate(100), small);  // the thread cache hands back the warmest block
  pool->deallocate(small, 100);

  void* large = pool->allocate(512 * KiB);
  pool->deallocate(large, 512 * KiB);
  EXPECT_EQ(pool->allocate(512 * KiB), large);  // best fit finds the same hole
  pool->deallocate(large, 512 * KiB);
  EXPECT_EQ(pool->stats().slabs_added, 1u);
}

TEST(SlabPool, CoalescesFreeNeighboursIntoOneBlock) {
  auto pool = make_pool(1 * MiB);
  void* a = pool->allocate(256 * KiB);
  void* b = pool->allocate(256 * KiB);
  void* c = pool->allocate(256 * KiB);
  ASSERT_EQ(static_cast<char*>(b), static_cast<char*>(a) + 256 * KiB);
  ASSERT_EQ(static_cast<char*>(c), static_cast<char*>(b) + 256 * KiB);
  ASSERT_EQ(pool->stats().slabs, 1u);
  pool->deallocate(a, 256 * KiB);
  pool->deallocate(b, 256 * KiB);
  // Only the merged hole of a and b can hold 512 KiB without a new slab.
  void* ab = pool->allocate(512 * KiB);
  EXPECT_EQ(ab, a);
  EXPECT_EQ(pool->stats().slabs, 1u);
  EXPECT_EQ(pool->stats().slabs_added, 1u);
  // Freeing everything merges the whole slab back, so trim can return it.
  pool->deallocate(c, 256 * KiB);
  pool->deallocate(ab, 512 * KiB);
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 0u);
  EXPECT_EQ(pool->stats().slab_bytes, 0u);
}

TEST(SlabPool, OversizedRequestGetsADedicatedSlabReturnedOnFree) {
  SlabPool::Options options;
  options.slab_bytes = 1 * MiB;
  options.retain_dedicated_slabs = 0;
  auto pool = std::make_unique<SlabPool>(ferry::make_mmap_source(false), options);
  CountingObserver observer;
  pool->add_slab_observer(observer);
  void* big = pool->allocate(3 * MiB);
  EXPECT_EQ(pool->stats().slabs, 1u);
  EXPECT_GE(pool->stats().slab_bytes, 3 * MiB);
  pool->deallocate(big, 3 * MiB);
  EXPECT_EQ(pool->stats().slabs, 0u);
  EXPECT_EQ(observer.total(observer.added), 1u);
  EXPECT_EQ(observer.total(observer.removed), 1u);
  pool->remove_slab_observer(observer);
}

TEST(SlabPool, FreedOversizedSlabsAreKeptForReuseUpToALimit) {
  auto pool = make_pool(1 * MiB);  // keeps up to 2 by default
  void* big = pool->allocate(3 * MiB);
  pool->deallocate(big, 3 * MiB);
  EXPECT_EQ(pool->stats().slabs, 1u) << "the slab was returned instead of kept";
  void* again = pool->allocate(3 * MiB);
  EXPECT_EQ(again, big) << "the kept slab was not reused";
  EXPECT_EQ(pool->stats().slabs_added, 1u);
  // Three freed at once: two are kept, the third goes back.
  void* b = pool->allocate(4 * MiB);
  void* c = pool->allocate(5 * MiB);
  pool->deallocate(again, 3 * MiB);
  pool->deallocate(b, 4 * MiB);
  pool->deallocate(c, 5 * MiB);
  EXPECT_EQ(pool->stats().slabs, 2u);
  EXPECT_EQ(pool->stats().slabs_removed, 1u);
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 0u);
}

TEST(SlabPool, ObserverHearsOfEachSlabOnceAddedAndOnceRemoved) {
  auto pool = make_pool(1 * MiB);
  void* early = pool->allocate(300 * KiB);  // a slab before anyone subscribes
  CountingObserver observer;
  pool->add_slab_observer(observer);
  EXPECT_EQ(observer.total(observer.added), 1u) << "existing slabs are replayed on subscription";

  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(pool->allocate(600 * KiB));  // one new slab each
  for (int i = 0; i < 2000; ++i) blocks.push_back(pool->allocate(1000));     // small runs share slabs
  const std::size_t slabs = pool->stats().slabs;
  EXPECT_EQ(observer.total(observer.added), slabs);
  for (auto [base, count] : observer.added) EXPECT_EQ(count, 1) << base;

  for (std::size_t i = 0; i < blocks.size(); ++i) pool->deallocate(blocks[i], i < 10 ? 600 * KiB : 1000);
  pool->deallocate(early, 300 * KiB);
  EXPECT_EQ(observer.total(observer.removed), 0u) << "ordinary slabs stay until trim";
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 0u);
  EXPECT_EQ(observer.total(observer.removed), slabs);
  for (auto [base, count] : observer.removed) EXPECT_EQ(count, 1) << base;

  pool->remove_slab_observer(observer);
  pool->deallocate(pool->allocate(10), 10);
  EXPECT_EQ(observer.total(observer.added), slabs) << "no calls after unsubscribing";
}

TEST(SlabPool, DestructionReportsRemainingSlabs) {
  CountingObserver observer;
  {
    auto pool = make_pool(1 * MiB);
    pool->add_slab_observer(observer);
    pool->allocate(2000);
    pool->allocate(1 * MiB);  // does not fit beside the small run: a second slab
  }
  EXPECT_EQ(observer.total(observer.added), 2u);
  EXPECT_EQ(observer.total(observer.removed), 2u);
}

TEST(SlabPool, StatisticsAreExact) {
  auto pool = make_pool(1 * MiB, ferry::OnInvalidFree::throw_error, /*thread_cache=*/false);
  EXPECT_EQ(pool->stats().bytes_out, 0u);
  void* a = pool->allocate(100, 64);    // 128 B class (the default 256 B alignment would pick 256)
  void* b = pool->allocate(5000);       // 8 KiB class
  void* c = pool->allocate(70 * KiB);   // large: 72 KiB of pages
  EXPECT_EQ(pool->stats().bytes_out, 128 + 8 * KiB + 72 * KiB);
  EXPECT_EQ(pool->stats().slabs, 1u);
  EXPECT_EQ(pool->stats().slab_bytes, 1 * MiB);
  pool->deallocate(b, 5000);
  EXPECT_EQ(pool->stats().bytes_out, 128 + 72 * KiB);
  pool->deallocate(a, 100);
  pool->deallocate(c, 70 * KiB);
  EXPECT_EQ(pool->stats().bytes_out, 0u);
  EXPECT_EQ(pool->stats().peak_slab_bytes, 1 * MiB);
  EXPECT_EQ(pool->stats().invalid_frees, 0u);
}

TEST(SlabPool, ThrowsOnForeignAndDoubleFrees) {
  auto pool = make_pool(1 * MiB, ferry::OnInvalidFree::throw_error);
  int on_stack = 0;
  EXPECT_THROW(pool->deallocate(&on_stack, sizeof on_stack), ferry::UsageError);
  auto heap = std::make_unique<char[]>(100);
  EXPECT_THROW(pool->deallocate(heap.get(), 100), ferry::UsageError);

  void* small = pool->allocate(256);
  EXPECT_THROW(pool->deallocate(static_cast<char*>(small) + 64, 64), ferry::UsageError) << "interior pointer";
  EXPECT_THROW(pool->deallocate(small, 4096), ferry::UsageError) << "size larger than the block";
  pool->deallocate(small, 256);
  try {
    pool->deallocate(small, 256);
    FAIL() << "double free of a small block went unnoticed";
  } catch (const ferry::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("freed twice"), std::string::npos) << e.what();
  }

  void* large = pool->allocate(200 * KiB);
  EXPECT_THROW(pool->deallocate(static_cast<char*>(large) + 8 * KiB, 1), ferry::UsageError);
  pool->deallocate(large, 200 * KiB);
  EXPECT_THROW(pool->deallocate(large, 200 * KiB), ferry::UsageError);

  // A pointer from a different pool is foreign too.
  auto other = make_pool(1 * MiB);
  void* theirs = other->allocate(128);
  EXPECT_THROW(pool->deallocate(theirs, 128), ferry::UsageError);
  other->deallocate(theirs, 128);
  EXPECT_EQ(pool->stats().invalid_frees, 8u);
}

TEST(SlabPool, LogPolicyReportsAndLeavesThePoolIntact) {
  auto pool = make_pool(1 * MiB, ferry::OnInvalidFree::log_error);
  void* p = pool->allocate(512);
  pool->deallocate(p, 512);
  EXPECT_NO_THROW(pool->deallocate(p, 512));  // logged, not applied
  int on_stack = 0;
  EXPECT_NO_THROW(pool->deallocate(&on_stack, 4));
  EXPECT_EQ(pool->stats().invalid_frees, 2u);
  // Had the double free been applied, the block would now be handed out twice.
  void* x = pool->allocate(512);
  void* y = pool->allocate(512);
  EXPECT_NE(x, y);
  pool->deallocate(x, 512);
  pool->deallocate(y, 512);
}

TEST(SlabPool, BlocksFreedOnAnotherThreadAreReused) {
  auto pool = make_pool(1 * MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) blocks.push_back(pool->allocate(256));
  std::thread([&] {
    for (void* p : blocks) pool->deallocate(p, 256);
  }).join();  // the other thread's cache is returned when it exits
  pool->flush_thread_cache();  // and this thread's leftovers from its refills
  EXPECT_EQ(pool->stats().bytes_out, 0u);
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 0u);
}

TEST(SlabPool, ThreadOutlivingItsPoolExitsCleanly) {
  std::mutex mutex;
  std::condition_variable cv;
  bool pool_gone = false;
  auto pool = make_pool(1 * MiB);
  std::barrier ready(2);
  std::thread worker([&] {
    void* p = pool->allocate(64);
    pool->deallocate(p, 64);  // leaves a block in this thread's cache
    ready.arrive_and_wait();
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return pool_gone; });
  });
  ready.arrive_and_wait();
  pool.reset();
  {
    std::lock_guard lock(mutex);
    pool_gone = true;
  }
  cv.notify_one();
  worker.join();  // must not touch the dead pool
  auto fresh = make_pool(1 * MiB);
  fresh->deallocate(fresh->allocate(64), 64);
}

TEST(SlabPool, TrimKeepsSlabsWithLiveBlocks) {
  auto pool = make_pool(1 * MiB);
  void* keep = pool->allocate(100);
  std::vector<void*> drop;
  for (int i = 0; i < 50; ++i) drop.push_back(pool->allocate(500 * KiB));
  for (void* p : drop) pool->deallocate(p, 500 * KiB);
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 1u);
  EXPECT_TRUE(pool->owns(keep));
  pool->deallocate(keep, 100);
  pool->trim();
  EXPECT_EQ(pool->stats().slabs, 0u);
  EXPECT_FALSE(pool->owns(keep));
}

TEST(SlabPool, SlabSizeMustBePositive) {
  SlabPool::Options options;
  options.slab_bytes = 0;
  EXPECT_THROW(SlabPool(ferry::make_mmap_source(false), options), ferry::UsageError);
  EXPECT_THROW(SlabPool(nullptr, SlabPool::Options{}), ferry::UsageError);
}

TEST(PinnedPool, UsesPinnedHostMemory) {
  ferry::PinnedPool pool;
  EXPECT_EQ(pool.kind(), ferry::MemoryKind::host_pinned);
  EXPECT_EQ(pool.device(), -1);
  void* p = pool.allocate(1 * MiB);
  ferry::testing::fill_pattern(p, 1 * MiB, 7);
  EXPECT_TRUE(ferry::testing::check_pattern(p, 1 * MiB, 7));
  pool.deallocate(p, 1 * MiB);
  EXPECT_NE(pool.describe().find("host-pinned"), std::string::npos) << pool.describe();
}

TEST(SlabPool, StressWithCrossThreadFrees) {
  auto pool = make_pool(2 * MiB);
  constexpr int kThreads = 4;
  std::mutex handoff_mutex;
  std::vector<std::tuple<void*, std::size_t, std::uint64_t>> handoff;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + static_cast<unsigned>(t));
      std::vector<std::tuple<void*, std::size_t, std::uint64_t>> live;
      auto release = [&](std::tuple<void*, std::size_t, std::uint64_t> block) {
        auto [p, bytes, tag] = block;
        if (!ferry::testing::check_pattern(p, bytes, tag)) failures.fetch_add(1);
        pool->deallocate(p, bytes);
      };
      for (std::uint64_t i = 0; i < 20000; ++i) {
        const int pick = static_cast<int>(rng() % 100);
        const std::size_t bytes = pick < 80 ? 1 + rng() % 2048 : pick < 97 ? 1 + rng() % (96 * KiB) : 1 + rng() % (3 * MiB);
        const std::uint64_t tag = (static_cast<std::uint64_t>(t + 1) << 48) | i;
        void* p = pool->allocate(bytes);
        ferry::testing::fill_pattern(p, bytes, tag);
        live.emplace_back(p, bytes, tag);
        if (rng() % 8 == 0) {  // hand a block to whichever thread comes next
          std::lock_guard lock(handoff_mutex);
          handoff.push_back(live.back());
          live.pop_back();
        }
        if (rng() % 4 == 0) {
          std::unique_lock lock(handoff_mutex);
          if (!handoff.empty()) {
            auto block = handoff.back();
            handoff.pop_back();
            lock.unlock();
            release(block);
          }
        }
        while (live.size() > 64 || (!live.empty() && rng() % 3 == 0)) {
          const std::size_t victim = rng() % live.size();
          release(live[victim]);
          live[victim] = live.back();
          live.pop_back();
        }
      }
      for (auto& block : live) release(block);
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& block : handoff) {
    auto [p, bytes, tag] = block;
    if (!ferry::testing::check_pattern(p, bytes, tag)) failures.fetch_add(1);
    pool->deallocate(p, bytes);
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool->stats().invalid_frees, 0u);
  pool->trim();
  EXPECT_EQ(pool->stats().bytes_out, 0u) << pool->describe();
  EXPECT_EQ(pool->stats().slabs, 0u) << pool->describe();
}

}  // namespace
