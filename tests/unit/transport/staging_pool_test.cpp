// The staging pool that sealed payloads land in.
#include <gtest/gtest.h>

#include "staging_pool.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(StagingPool, HandsBackAFreedBufferOfASimilarSizeOnly) {
  StagingPool pool(8 << 20, 64 << 10);
  std::byte* first = nullptr;
  {
    auto buffer = pool.take(1 << 20);
    first = buffer.get();
  }
  EXPECT_EQ(pool.idle_bytes(), std::size_t{1} << 20);
  {
    auto again = pool.take((1 << 20) - 100);
    EXPECT_EQ(again.get(), first) << "a freed buffer that fits was not reused";
    EXPECT_EQ(pool.idle_bytes(), 0u);
    auto small = pool.take(300 << 10);  // the 1 MiB one is taken; and one over twice the size is never handed out
    EXPECT_NE(small.get(), first);
  }
  EXPECT_NE(pool.take(100 << 10).get(), first) << "a buffer over twice the size was handed out";
  // Idle buffers never exceed the limit.
  {
    std::vector<std::shared_ptr<std::byte[]>> many;
    for (int i = 0; i < 12; ++i) many.push_back(pool.take(1 << 20));
  }
  EXPECT_LE(pool.idle_bytes(), std::size_t{8} << 20);
}

}  // namespace
}  // namespace ferry::transport
