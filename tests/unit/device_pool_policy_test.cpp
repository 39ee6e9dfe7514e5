// DevicePool's release policy, on any machine: how much freed memory the pool
// keeps mapped for reuse (release_threshold_for), and when an idle GPU gives
// that reserve back (IdleTrim). What the CUDA pool then does with them is in
// allocator_gpu_test (label gpu).
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>

#include "ferry/allocator/device_pool.hpp"

namespace {

using ferry::DevicePool;
using ferry::IdleTrim;
using namespace std::chrono_literals;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

TEST(DevicePoolPolicy, KeepsAModestReserveNotTheBound) {
  // An H100's bound: the reserve is capped, so a peak's tens of GiB go back.
  EXPECT_EQ(DevicePool::release_threshold_for(70 * GiB), 1 * GiB);
  EXPECT_EQ(DevicePool::release_threshold_for(8 * GiB), 512 * MiB);  // a sixteenth in between
  EXPECT_EQ(DevicePool::release_threshold_for(256 * MiB), 64 * MiB) << "a floor against remapping churn";
  EXPECT_EQ(DevicePool::release_threshold_for(16 * MiB), 16 * MiB) << "never above the bound";
  EXPECT_EQ(DevicePool::release_threshold_for(0), 0u);
  for (std::size_t bound : {std::size_t{1}, 3 * MiB, 100 * MiB, 5 * GiB, 80 * GiB, std::size_t{1} << 50})
    EXPECT_LE(DevicePool::release_threshold_for(bound), bound) << bound;
}

TEST(DevicePoolPolicy, AutomaticIsTheDefault) {
  EXPECT_EQ(DevicePool::Options{}.release_threshold, DevicePool::automatic_release_threshold);
}

TEST(IdleTrim, NothingToTrimBeforeAnyUse) {
  IdleTrim idle(2s);
  const auto t0 = IdleTrim::Clock::now();
  EXPECT_FALSE(idle.due(t0 + 1h));
  EXPECT_EQ(idle.wait(t0), IdleTrim::Clock::duration::max());
}

TEST(IdleTrim, OnceADelayAfterTheLastUse) {
  IdleTrim idle(2s);
  const auto t0 = IdleTrim::Clock::now();
  idle.used(t0);
  EXPECT_FALSE(idle.due(t0 + 1s));
  EXPECT_EQ(idle.wait(t0 + 500ms), 1500ms);
  idle.used(t0 + 1500ms);  // busy again: the clock restarts
  EXPECT_FALSE(idle.due(t0 + 2s));
  EXPECT_TRUE(idle.due(t0 + 3500ms));
  EXPECT_EQ(idle.wait(t0 + 4s), IdleTrim::Clock::duration::zero());
  idle.trimmed();
  EXPECT_FALSE(idle.due(t0 + 1h)) << "one trim per idle spell";
  EXPECT_EQ(idle.wait(t0 + 1h), IdleTrim::Clock::duration::max());
  idle.used(t0 + 2h);
  EXPECT_TRUE(idle.due(t0 + 2h + 2s));
}

}  // namespace
