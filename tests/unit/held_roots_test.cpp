// HeldRoots: what a memory node evicts from and brings home holds each live
// buffer once, forgets dead ones, and take() leaves nothing behind.
#include "data/held_roots.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace ferry::detail {
namespace {

TEST(HeldRoots, HoldsEachLiveRootOnceAndForgetsDeadOnes) {
  HeldRoots held;
  auto a = std::make_shared<BufferRoot>();
  auto b = std::make_shared<BufferRoot>();
  held.hold(a);
  held.hold(a);
  held.hold(b);
  EXPECT_EQ(held.snapshot().size(), 2u);
  b.reset();
  const auto live = held.snapshot();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0], a);
}

TEST(HeldRoots, TakeEmptiesIt) {
  HeldRoots held;
  auto a = std::make_shared<BufferRoot>();
  held.hold(a);
  EXPECT_EQ(held.take().size(), 1u);
  EXPECT_TRUE(held.snapshot().empty());
}

TEST(HeldRoots, ManyDeadRootsLeaveTheLiveOneHeld) {
  HeldRoots held;
  auto kept = std::make_shared<BufferRoot>();
  held.hold(kept);
  for (int i = 0; i < 10000; ++i) held.hold(std::make_shared<BufferRoot>());
  const auto live = held.snapshot();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0], kept);
}

}  // namespace
}  // namespace ferry::detail
