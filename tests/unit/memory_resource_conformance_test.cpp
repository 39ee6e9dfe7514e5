// The contract every host-accessible Ferry memory resource keeps, run against
// each pool and each adaptor stack (RMM's typed-suite pattern).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ferry/allocator/limiting_adaptor.hpp"
#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/statistics_adaptor.hpp"
#include "ferry/allocator/synchronized_adaptor.hpp"
#include "ferry/error.hpp"
#include "test_patterns.hpp"

namespace {

using ferry::MemoryResource;

struct DefaultPinned {
  static std::shared_ptr<MemoryResource> make() { return std::make_shared<ferry::PinnedPool>(); }
};
struct MmapNoThreadCache {
  static std::shared_ptr<MemoryResource> make() {
    ferry::SlabPool::Options options;
    options.thread_cache = false;
    options.slab_bytes = std::size_t{2} << 20;
    return std::make_shared<ferry::SlabPool>(ferry::make_mmap_source(false), options);
  }
};
struct SmallSlabs {
  static std::shared_ptr<MemoryResource> make() {
    ferry::SlabPool::Options options;
    options.slab_bytes = std::size_t{1} << 20;  // forces many slabs and dedicated ones
    return std::make_shared<ferry::PinnedPool>(options);
  }
};
struct Statistics {
  static std::shared_ptr<MemoryResource> make() {
    return std::make_shared<ferry::StatisticsAdaptor>(std::make_shared<ferry::PinnedPool>());
  }
};
struct Limited {
  static std::shared_ptr<MemoryResource> make() {
    return std::make_shared<ferry::LimitingAdaptor>(std::make_shared<ferry::PinnedPool>(), std::size_t{1} << 30);
  }
};
struct Synchronized {
  static std::shared_ptr<MemoryResource> make() {
    return std::make_shared<ferry::SynchronizedAdaptor>(std::make_shared<ferry::PinnedPool>());
  }
};

template <typename Factory>
class MemoryResourceConformance : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryResource> resource = Factory::make();
};

using Resources = ::testing::Types<DefaultPinned, MmapNoThreadCache, SmallSlabs, Statistics, Limited, Synchronized>;
TYPED_TEST_SUITE(MemoryResourceConformance, Resources);

TYPED_TEST(MemoryResourceConformance, HonoursAlignmentForEverySizeAndAlignment) {
  MemoryResource& mr = *this->resource;
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t bytes = 1; bytes <= (std::size_t{4} << 20); bytes = bytes * 2 + 1) {
    for (std::size_t alignment = 1; alignment <= (std::size_t{1} << 20); alignment <<= 1) {
      void* p = mr.allocate(bytes, alignment);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u) << bytes << " bytes, alignment " << alignment;
      // Without an explicit alignment every block is at least default-aligned.
      live.emplace_back(p, bytes);
    }
    void* q = mr.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % ferry::default_alignment, 0u) << bytes;
    live.emplace_back(q, bytes);
  }
  for (auto [p, bytes] : live) mr.deallocate(p, bytes);
}

TYPED_TEST(MemoryResourceConformance, LiveBlocksNeverOverlap) {
  MemoryResource& mr = *this->resource;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> shift(0, 21);
  std::vector<std::tuple<void*, std::size_t, std::uint64_t>> live;
  for (std::uint64_t tag = 1; tag <= 600; ++tag) {
    const std::size_t bytes = (std::size_t{1} << shift(rng)) + (rng() % 100);
    void* p = mr.allocate(bytes);
    ferry::testing::fill_pattern(p, bytes, tag);
    live.emplace_back(p, bytes, tag);
    if (rng() % 3 == 0) {  // free a random live block
      const std::size_t victim = rng() % live.size();
      auto [q, qbytes, qtag] = live[victim];
      ASSERT_TRUE(ferry::testing::check_pattern(q, qbytes, qtag)) << "block of " << qbytes << " bytes was overwritten";
      mr.deallocate(q, qbytes);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  for (auto [p, bytes, tag] : live) {
    ASSERT_TRUE(ferry::testing::check_pattern(p, bytes, tag)) << "block of " << bytes << " bytes was overwritten";
    mr.deallocate(p, bytes);
  }
}

TYPED_TEST(MemoryResourceConformance, ZeroBytesGivesDistinctPointers) {
  MemoryResource& mr = *this->resource;
  void* a = mr.allocate(0);
  void* b = mr.allocate(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  mr.deallocate(a, 0);
  mr.deallocate(b, 0);
}

TYPED_TEST(MemoryResourceConformance, RejectsAlignmentThatIsNotAPowerOfTwo) {
  MemoryResource& mr = *this->resource;
  EXPECT_THROW(mr.allocate(64, 0), ferry::UsageError);
  EXPECT_THROW(mr.allocate(64, 48), ferry::UsageError);
  void* p = mr.allocate(64);  // and keeps working
  mr.deallocate(p, 64);
}

TYPED_TEST(MemoryResourceConformance, RefusesImpossibleRequestsWithOutOfMemory) {
  MemoryResource& mr = *this->resource;
  const std::size_t huge = std::size_t{1} << 60;
  try {
    mr.allocate(huge);
    FAIL() << "allocating 1 EiB succeeded";
  } catch (const ferry::OutOfMemory& e) {
    EXPECT_EQ(e.requested_bytes(), huge);
    EXPECT_NE(std::string(e.what()).find("1024.0 PiB"), std::string::npos) << e.what();
  }
  void* p = mr.allocate(4096);
  mr.deallocate(p, 4096);
}

TYPED_TEST(MemoryResourceConformance, IsEqualToItselfOnly) {
  MemoryResource& mr = *this->resource;
  auto other = TypeParam::make();
  EXPECT_TRUE(mr.is_equal(mr));
  EXPECT_FALSE(mr.is_equal(*other));
  EXPECT_FALSE(mr.describe().empty());
}

TYPED_TEST(MemoryResourceConformance, ConcurrentUseKeepsBlocksApart) {
  MemoryResource& mr = *this->resource;
  constexpr int kThreads = 3;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t) + 7);
      std::vector<std::tuple<void*, std::size_t, std::uint64_t>> live;
      for (std::uint64_t i = 0; i < 3000; ++i) {
        const std::size_t bytes = rng() % 4 == 0 ? 70000 + rng() % 200000 : 1 + rng() % 4000;
        const std::uint64_t tag = (static_cast<std::uint64_t>(t) << 40) | i;
        void* p = mr.allocate(bytes);
        ferry::testing::fill_pattern(p, bytes, tag);
        live.emplace_back(p, bytes, tag);
        while (live.size() > 40 || (!live.empty() && rng() % 2 == 0)) {
          const std::size_t victim = rng() % live.size();
          auto [q, qbytes, qtag] = live[victim];
          if (!ferry::testing::check_pattern(q, qbytes, qtag)) failures.fetch_add(1);
          mr.deallocate(q, qbytes);
          live[victim] = live.back();
          live.pop_back();
        }
      }
      for (auto [q, qbytes, qtag] : live) {
        if (!ferry::testing::check_pattern(q, qbytes, qtag)) failures.fetch_add(1);
        mr.deallocate(q, qbytes);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
