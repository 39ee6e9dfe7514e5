#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "ferry/allocator/limiting_adaptor.hpp"
#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/statistics_adaptor.hpp"
#include "ferry/allocator/synchronized_adaptor.hpp"
#include "ferry/error.hpp"

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

TEST(StatisticsAdaptor, CountsExactly) {
  auto pool = std::make_shared<ferry::PinnedPool>();
  ferry::StatisticsAdaptor stats(pool);
  void* a = stats.allocate(100);
  void* b = stats.allocate(3 * MiB);
  void* c = stats.allocate(7);
  auto s = stats.stats();
  EXPECT_EQ(s.bytes_in_use, 100 + 3 * MiB + 7);
  EXPECT_EQ(s.peak_bytes, 100 + 3 * MiB + 7);
  EXPECT_EQ(s.blocks_in_use, 3u);
  EXPECT_EQ(s.allocations, 3u);
  stats.deallocate(b, 3 * MiB);
  s = stats.stats();
  EXPECT_EQ(s.bytes_in_use, 107u);
  EXPECT_EQ(s.peak_bytes, 100 + 3 * MiB + 7);
  EXPECT_EQ(s.deallocations, 1u);
  stats.reset_peak();
  EXPECT_EQ(stats.stats().peak_bytes, 107u);
  stats.deallocate(a, 100);
  stats.deallocate(c, 7);
  EXPECT_EQ(stats.stats().bytes_in_use, 0u);
  EXPECT_EQ(stats.stats().blocks_in_use, 0u);
}

TEST(StatisticsAdaptor, ExactUnderConcurrency) {
  auto stats = std::make_shared<ferry::StatisticsAdaptor>(std::make_shared<ferry::PinnedPool>());
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      std::vector<void*> blocks;
      for (int i = 0; i < 5000; ++i) blocks.push_back(stats->allocate(64));
      for (void* p : blocks) stats->deallocate(p, 64);
      for (int i = 0; i < 1000; ++i) stats->allocate(32);  // kept: 1000 * 32 per thread
    });
  for (auto& thread : threads) thread.join();
  auto s = stats->stats();
  EXPECT_EQ(s.allocations, 12000u);
  EXPECT_EQ(s.deallocations, 10000u);
  EXPECT_EQ(s.bytes_in_use, 2u * 1000 * 32);
  EXPECT_GE(s.peak_bytes, 5000u * 64);
}

TEST(StatisticsAdaptor, RejectedFreeLeavesCountsTrue) {
  ferry::SlabPool::Options options;
  options.on_invalid_free = ferry::OnInvalidFree::throw_error;
  auto pool = std::make_shared<ferry::PinnedPool>(options);
  ferry::StatisticsAdaptor stats(pool);
  void* p = stats.allocate(64);
  int foreign = 0;
  EXPECT_THROW(stats.deallocate(&foreign, 4), ferry::UsageError);
  EXPECT_EQ(stats.stats().bytes_in_use, 64u);
  stats.deallocate(p, 64);
}

TEST(LimitingAdaptor, RefusesPastTheCapAndNamesIt) {
  auto pool = std::make_shared<ferry::PinnedPool>();
  ferry::LimitingAdaptor limited(pool, 1 * MiB);
  void* a = limited.allocate(600 * KiB);
  try {
    limited.allocate(500 * KiB);
    FAIL() << "cap not enforced";
  } catch (const ferry::OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.requested_bytes(), 500 * KiB);
    EXPECT_NE(what.find("500.0 KiB"), std::string::npos) << what;
    EXPECT_NE(what.find("cap of 1.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("600.0 KiB in use"), std::string::npos) << what;
  }
  EXPECT_EQ(limited.bytes_in_use(), 600 * KiB);
  void* b = limited.allocate(424 * KiB);  // exactly up to the cap is fine
  EXPECT_EQ(limited.bytes_in_use(), 1 * MiB);
  limited.deallocate(a, 600 * KiB);
  limited.deallocate(b, 424 * KiB);
  EXPECT_EQ(limited.bytes_in_use(), 0u);
}

TEST(LimitingAdaptor, UpstreamFailureReleasesTheReservation) {
  auto pool = std::make_shared<ferry::PinnedPool>();
  ferry::LimitingAdaptor limited(pool, ~std::size_t{0});
  EXPECT_THROW(limited.allocate(std::size_t{1} << 60), ferry::OutOfMemory);
  EXPECT_EQ(limited.bytes_in_use(), 0u);
}

TEST(LimitingAdaptor, ConcurrentRequestsNeverCrossTheCap) {
  auto stats = std::make_shared<ferry::StatisticsAdaptor>(std::make_shared<ferry::PinnedPool>());
  auto limited = std::make_shared<ferry::LimitingAdaptor>(stats, 64 * KiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 4000; ++i) {
        try {
          limited->deallocate(limited->allocate(10 * KiB), 10 * KiB);
        } catch (const ferry::OutOfMemory&) {
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_LE(stats->stats().peak_bytes, 64 * KiB);
  EXPECT_EQ(limited->bytes_in_use(), 0u);
}

// A resource that corrupts its own state when called concurrently.
class UnsafeCounter : public ferry::MemoryResource {
 public:
  std::size_t calls = 0;
  ferry::MemoryKind kind() const noexcept override { return ferry::MemoryKind::host_pageable; }
  std::string describe() const override { return "unsafe counter"; }

 protected:
  void* do_allocate(std::size_t bytes, std::size_t alignment, ferry::StreamRef) override {
    const std::size_t seen = calls;
    std::this_thread::yield();  // widen the race window
    calls = seen + 1;
    return ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{alignment});
  }
  void do_deallocate(void* ptr, std::size_t, ferry::StreamRef) override {
    ::operator delete(ptr, std::align_val_t{ferry::default_alignment});
  }
};

TEST(SynchronizedAdaptor, SerialisesAnUnsafeUpstream) {
  auto unsafe = std::make_shared<UnsafeCounter>();
  auto safe = std::make_shared<ferry::SynchronizedAdaptor>(unsafe);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) safe->deallocate(safe->allocate(16), 16);
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(unsafe->calls, 8000u);
}

TEST(Adaptors, StackAndForwardKind) {
  auto pool = std::make_shared<ferry::PinnedPool>();
  auto stack = std::make_shared<ferry::StatisticsAdaptor>(
      std::make_shared<ferry::LimitingAdaptor>(std::make_shared<ferry::SynchronizedAdaptor>(pool), 1 * MiB));
  EXPECT_EQ(stack->kind(), ferry::MemoryKind::host_pinned);
  const std::string described = stack->describe();
  EXPECT_NE(described.find("stats("), std::string::npos) << described;
  EXPECT_NE(described.find("limit("), std::string::npos) << described;
  EXPECT_NE(described.find("synchronized"), std::string::npos) << described;
  EXPECT_THROW(ferry::StatisticsAdaptor(nullptr), ferry::UsageError);
}

}  // namespace
