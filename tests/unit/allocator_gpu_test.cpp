// DevicePool and UnifiedPool on a real GPU (ctest label gpu). Each GPU test
// skips, saying why, where there is no device; the last test runs everywhere
// and checks that the pools refuse honestly without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ferry/allocator/device_pool.hpp"
#include "ferry/allocator/unified_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using ferry::DevicePool;
using ferry::OnInvalidFree;
using ferry::OutOfMemory;
using ferry::UnifiedPool;
using ferry::UsageError;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

class RequiresGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  }
};
using DevicePoolGpu = RequiresGpu;
using UnifiedPoolGpu = RequiresGpu;

DevicePool::Options bounded(std::size_t max_bytes, OnInvalidFree on_invalid_free = OnInvalidFree::throw_error) {
  DevicePool::Options options;
  options.max_bytes = max_bytes;
  options.on_invalid_free = on_invalid_free;
  return options;
}

template <class Make>
std::string usage_error_of(Make make) {
  try {
    make();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError thrown)";
}

#if FERRY_WITH_CUDA
std::size_t count_of(const std::vector<unsigned char>& bytes, unsigned char value, std::size_t from, std::size_t to) {
  return static_cast<std::size_t>(std::count(bytes.begin() + static_cast<std::ptrdiff_t>(from),
                                             bytes.begin() + static_cast<std::ptrdiff_t>(to), value));
}

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreate(&handle), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(handle); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ferry::StreamRef ref() const { return ferry::StreamRef{handle}; }
};

TEST_F(DevicePoolGpu, WritesOnTheDeviceAndReadsBack) {
  DevicePool pool;
  EXPECT_EQ(pool.kind(), ferry::MemoryKind::device);
  EXPECT_EQ(pool.device(), 0);
  const std::size_t n = MiB + 17;
  void* p = pool.allocate(n);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(cudaMemset(p, 0xAB, n), cudaSuccess);
  std::vector<unsigned char> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(count_of(host, 0xAB, 0, n), n);
  EXPECT_EQ(pool.stats().blocks_in_use, 1u);
  pool.deallocate(p, n);
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
}

TEST_F(DevicePoolGpu, IsOrderedOnTheCallersStream) {
  Stream stream;
  DevicePool pool;
  const std::size_t n = 4 * MiB;
  void* p = pool.allocate(n, ferry::default_alignment, stream.ref());
  std::vector<unsigned char> host(n);
  ASSERT_EQ(cudaMemsetAsync(p, 0x5A, n, stream.handle), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), p, n, cudaMemcpyDeviceToHost, stream.handle), cudaSuccess);
  // Freed behind the copy on the same stream, without waiting for it.
  pool.deallocate(p, n, stream.ref());
  void* again = pool.allocate(n, ferry::default_alignment, stream.ref());
  ASSERT_EQ(cudaMemsetAsync(again, 0x00, n, stream.handle), cudaSuccess);
  pool.deallocate(again, n, stream.ref());
  ASSERT_EQ(cudaStreamSynchronize(stream.handle), cudaSuccess);
  EXPECT_EQ(count_of(host, 0x5A, 0, n), n);
  pool.synchronize();
  pool.trim();
}

// After a peak, freed memory above the release threshold goes back to the
// device at the next synchronisation; trim() gives back the rest of the
// reserve. Blocks in use are never touched.
TEST_F(DevicePoolGpu, KeepsOnlyTheThresholdAfterAPeakAndTrimGivesTheRestBack) {
  DevicePool::Options options;
  options.release_threshold = 4 * MiB;
  DevicePool pool(options);
  EXPECT_EQ(pool.stats().release_threshold, 4 * MiB);
  void* kept = pool.allocate(MiB);
  std::vector<void*> peak;
  for (int i = 0; i < 8; ++i) peak.push_back(pool.allocate(16 * MiB));
  EXPECT_GE(pool.reserved_bytes(), 129 * MiB);
  for (void* p : peak) pool.deallocate(p, 16 * MiB);
  pool.synchronize();
  // The CUDA pool maps in chunks of a few MiB: some slack above the threshold.
  EXPECT_LE(pool.reserved_bytes(), 4 * MiB + 64 * MiB) << "the peak stayed reserved";
  pool.trim();
  EXPECT_GE(pool.reserved_bytes(), MiB) << "the block in use went too";
  EXPECT_EQ(pool.stats().trims, 1u);
  ASSERT_EQ(cudaMemset(kept, 0x11, MiB), cudaSuccess);  // still usable
  pool.deallocate(kept, MiB);
  pool.synchronize();
  pool.trim();
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

TEST_F(DevicePoolGpu, DefaultThresholdIsTheModestOne) {
  DevicePool pool;
  const auto stats = pool.stats();
  EXPECT_EQ(stats.release_threshold, DevicePool::release_threshold_for(stats.bound_bytes));
  EXPECT_LT(stats.release_threshold, stats.bound_bytes);
}
#endif  // FERRY_WITH_CUDA

TEST_F(DevicePoolGpu, AlignsTo256AndMore) {
  DevicePool pool;
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{255}, std::size_t{257},
                              std::size_t{4097}, MiB + 1}) {
    void* p = pool.allocate(n, 256);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u) << n << " bytes";
    for (const auto& [other, bytes] : blocks) EXPECT_NE(p, other) << n << " bytes";
    blocks.emplace_back(p, n);
  }
  void* page_aligned = pool.allocate(100, 4096);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(page_aligned) % 4096, 0u);
  blocks.emplace_back(page_aligned, 100);
  for (const auto& [p, n] : blocks) pool.deallocate(p, n);
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
}

TEST_F(DevicePoolGpu, RefusesRequestsAboveTheBound) {
  DevicePool pool(bounded(MiB));
  EXPECT_EQ(pool.stats().bound_bytes, MiB);
  void* held = pool.allocate(768 * KiB);
  try {
    pool.allocate(512 * KiB);
    ADD_FAILURE() << "no OutOfMemory above the bound";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested_bytes(), 512 * KiB);
    EXPECT_NE(std::string(e.what()).find("bound"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pool.allocate(2 * MiB), OutOfMemory);
  pool.deallocate(held, 768 * KiB);
  void* fits = pool.allocate(512 * KiB);
  pool.deallocate(fits, 512 * KiB);
}

TEST_F(DevicePoolGpu, ReclaimsBeforeFailing) {
  DevicePool pool(bounded(MiB));
  void* replica = pool.allocate(768 * KiB);
  int calls = 0;
  std::size_t asked = 0;
  pool.set_reclaim_handler([&](std::size_t needed) -> std::size_t {
    ++calls;
    asked = needed;
    if (replica == nullptr) return 0;
    pool.deallocate(replica, 768 * KiB);
    replica = nullptr;
    return 768 * KiB;
  });

  void* p = pool.allocate(512 * KiB);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(asked, 256 * KiB);
  EXPECT_EQ(replica, nullptr);

  // Nothing left to evict: the handler is asked, then the request fails.
  EXPECT_THROW(pool.allocate(768 * KiB), OutOfMemory);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(pool.stats().reclaim_calls, 2u);
  pool.deallocate(p, 512 * KiB);
}

TEST_F(DevicePoolGpu, DetectsForeignAndDoubleFrees) {
  DevicePool pool(bounded(MiB, OnInvalidFree::throw_error));
  int local = 0;
  EXPECT_THROW(pool.deallocate(&local, sizeof local), UsageError);
  void* p = pool.allocate(64);
  EXPECT_THROW(pool.deallocate(p, 65), UsageError);
  pool.deallocate(p, 64);
  EXPECT_THROW(pool.deallocate(p, 64), UsageError);
  EXPECT_EQ(pool.stats().invalid_frees, 3u);

  DevicePool lenient(bounded(MiB, OnInvalidFree::log_error));
  EXPECT_NO_THROW(lenient.deallocate(&local, sizeof local));
  EXPECT_EQ(lenient.stats().invalid_frees, 1u);
  void* q = lenient.allocate(64);
  lenient.deallocate(q, 64);
}

TEST_F(DevicePoolGpu, RefusesAnOrdinalOutOfRange) {
  DevicePool::Options options;
  options.device = ferry::cuda::device_count();
  EXPECT_THROW(DevicePool{options}, UsageError);
  options.device = -1;
  EXPECT_THROW(DevicePool{options}, UsageError);
}

#if FERRY_WITH_CUDA
TEST_F(UnifiedPoolGpu, HostWritesDeviceWritesHostReads) {
  UnifiedPool pool;
  EXPECT_EQ(pool.kind(), ferry::MemoryKind::managed);
  EXPECT_EQ(pool.device(), 0);
  EXPECT_FALSE(pool.options().thread_cache);
  EXPECT_EQ(pool.source().name(), "cudaMallocManaged");

  const std::size_t n = MiB;
  auto* p = static_cast<unsigned char*>(pool.allocate(n));
  std::memset(p, 0x11, n);
  Stream stream;
  pool.advise_preferred(p, n, 0);
  pool.prefetch(p, n, 0, stream.ref());
  ASSERT_EQ(cudaMemsetAsync(p, 0x77, n / 2, stream.handle), cudaSuccess);
  pool.prefetch(p, n, UnifiedPool::host, stream.ref());
  ASSERT_EQ(cudaStreamSynchronize(stream.handle), cudaSuccess);
  const std::vector<unsigned char> seen(p, p + n);
  EXPECT_EQ(count_of(seen, 0x77, 0, n / 2), n / 2);
  EXPECT_EQ(count_of(seen, 0x11, n / 2, n), n - n / 2);

  int local = 0;
  EXPECT_THROW(pool.prefetch(&local, sizeof local, 0), UsageError);
  pool.deallocate(p, n);
}
#endif  // FERRY_WITH_CUDA

TEST_F(UnifiedPoolGpu, CapsManagedMemoryBelowFreeDeviceMemory) {
  const ferry::cuda::DeviceInfo info = ferry::cuda::device_info(0);
  auto source = ferry::make_managed_source(0, 0.01);
  const std::size_t cap = source->capacity();
  EXPECT_LE(cap, info.total_bytes / 100 + 1);
  ASSERT_GT(cap, 4 * ferry::SlabPool::page_bytes);

  const std::size_t half = cap / 2 / ferry::SlabPool::page_bytes * ferry::SlabPool::page_bytes;
  void* first = source->map(half);
  EXPECT_THROW(source->map(cap - half + ferry::SlabPool::page_bytes), OutOfMemory);
  source->unmap(first, half);
  void* whole = source->map(cap / ferry::SlabPool::page_bytes * ferry::SlabPool::page_bytes);
  source->unmap(whole, cap / ferry::SlabPool::page_bytes * ferry::SlabPool::page_bytes);

  UnifiedPool::Options options;
  options.max_fraction = 0.01;
  UnifiedPool pool(options);
  EXPECT_THROW(pool.allocate(2 * pool.source().capacity()), OutOfMemory);
}

TEST_F(UnifiedPoolGpu, RefusesAnOrdinalOutOfRange) {
  UnifiedPool::Options options;
  options.device = ferry::cuda::device_count();
  EXPECT_THROW(UnifiedPool{options}, UsageError);
  options.device = -1;
  EXPECT_THROW(UnifiedPool{options}, UsageError);
}

// Not skipped: runs on every machine and build.
TEST(GpuPoolsAnywhere, RefuseWithTheReasonWhenTheDeviceIsMissing) {
  // The ordinal equal to the device count is out of range everywhere.
  DevicePool::Options device_options;
  device_options.device = ferry::cuda::device_count();
  const std::string device_error = usage_error_of([&] { DevicePool pool(device_options); });
  EXPECT_NE(device_error.find("CUDA"), std::string::npos) << device_error;

  UnifiedPool::Options unified_options;
  unified_options.device = ferry::cuda::device_count();
  const std::string unified_error = usage_error_of([&] { UnifiedPool pool(unified_options); });
  EXPECT_NE(unified_error.find("CUDA"), std::string::npos) << unified_error;

  if (ferry::cuda::device_count() == 0) {
    const std::string& reason = ferry::cuda::unavailable_reason();
    EXPECT_NE(reason.find("CUDA"), std::string::npos) << reason;
    const std::string default_device = usage_error_of([] { DevicePool pool; });
    EXPECT_NE(default_device.find(reason), std::string::npos) << default_device;
    const std::string default_unified = usage_error_of([] { UnifiedPool pool; });
    EXPECT_NE(default_unified.find(reason), std::string::npos) << default_unified;
  }
}

}  // namespace
