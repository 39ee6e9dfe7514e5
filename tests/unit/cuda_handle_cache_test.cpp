// The cuBLAS/cuSOLVER handle cache's keying, on any machine: a handle per
// (device, stream), and a new stream at a destroyed stream's address (CUDA
// reuses addresses; its stream ids are never reused) gets a new handle while
// the stale one is destroyed. Handles here are numbers standing for the
// library's, created and destroyed through counters.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "cuda/handle_cache.hpp"

namespace ferry::kernels::cuda {
namespace {

struct Library {
  int created = 0;
  std::vector<int> destroyed;
  auto create() {
    return [this] { return ++created; };
  }
  auto destroy() {
    return [this](int h) { destroyed.push_back(h); };
  }
};

int stream_a = 0, stream_b = 0;  // two distinct addresses

TEST(HandleCache, OneHandlePerDeviceAndStream) {
  HandleCache<int> cache;
  Library lib;
  const int h = cache.get({0, &stream_a}, 7, lib.create(), lib.destroy());
  EXPECT_EQ(cache.get({0, &stream_a}, 7, lib.create(), lib.destroy()), h);
  EXPECT_NE(cache.get({0, &stream_b}, 8, lib.create(), lib.destroy()), h);
  EXPECT_NE(cache.get({1, &stream_a}, 9, lib.create(), lib.destroy()), h) << "another GPU's stream";
  EXPECT_EQ(lib.created, 3);
  EXPECT_TRUE(lib.destroyed.empty());
  EXPECT_EQ(cache.size(), 3u);
}

TEST(HandleCache, ANewStreamAtAReusedAddressGetsItsOwnHandle) {
  HandleCache<int> cache;
  Library lib;
  const int old_handle = cache.get({0, &stream_a}, 7, lib.create(), lib.destroy());
  // Stream 7 was destroyed without a release; stream 12 got its address.
  const int new_handle = cache.get({0, &stream_a}, 12, lib.create(), lib.destroy());
  EXPECT_NE(new_handle, old_handle);
  EXPECT_EQ(lib.destroyed, std::vector<int>{old_handle}) << "the stale handle must not leak";
  EXPECT_EQ(cache.get({0, &stream_a}, 12, lib.create(), lib.destroy()), new_handle);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(HandleCache, ReleaseDestroysOnlyThatStreamsHandle) {
  HandleCache<int> cache;
  Library lib;
  const int a = cache.get({0, &stream_a}, 1, lib.create(), lib.destroy());
  const int b = cache.get({0, &stream_b}, 2, lib.create(), lib.destroy());
  cache.release({0, &stream_a}, lib.destroy());
  EXPECT_EQ(lib.destroyed, std::vector<int>{a});
  cache.release({0, &stream_a}, lib.destroy());  // twice: nothing more
  EXPECT_EQ(lib.destroyed.size(), 1u);
  EXPECT_EQ(cache.get({0, &stream_b}, 2, lib.create(), lib.destroy()), b);
  EXPECT_NE(cache.get({0, &stream_a}, 3, lib.create(), lib.destroy()), a);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(HandleCache, AFailedCreationCachesNothing) {
  HandleCache<int> cache;
  Library lib;
  EXPECT_THROW(cache.get({0, &stream_a}, 1, []() -> int { throw std::runtime_error("cublasCreate failed"); },
                         lib.destroy()),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.get({0, &stream_a}, 1, lib.create(), lib.destroy()), 1);
}

}  // namespace
}  // namespace ferry::kernels::cuda
