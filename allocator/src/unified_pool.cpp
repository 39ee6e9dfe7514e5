#include "ferry/allocator/unified_pool.hpp"

#include <fmt/format.h>

#include <atomic>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ferry/detail/cuda_check.hpp"
#include "ferry/detail/cuda_current_device.hpp"
#endif

namespace ferry {

namespace {

void require_device(int device, const char* who) {
  const int count = cuda::device_count();
  if (device >= 0 && device < count) return;
  if (count == 0)
    throw UsageError(fmt::format("{}: CUDA device {} is not available: {}", who, device, cuda::unavailable_reason()));
  throw UsageError(fmt::format("{}: CUDA device {} does not exist ({} device(s))", who, device, count));
}

#if FERRY_WITH_CUDA

class ManagedSource final : public SlabSource {
 public:
  ManagedSource(int device, std::size_t capacity) : device_(device), capacity_(capacity) {}

  void* map(std::size_t bytes) override {
    // Reserved before the call, so concurrent pools cannot both pass the cap.
    std::size_t now = mapped_.load(std::memory_order_relaxed);
    do {
      if (bytes > capacity_ || now > capacity_ - bytes)
        throw OutOfMemory(fmt::format("cudaMallocManaged (device {}): a slab of {} would bring managed memory to {}, "
                                      "above the cap of {} (a fraction of the device's free memory)",
                                      device_, format_bytes(bytes), format_bytes(now + bytes),
                                      format_bytes(capacity_)),
                          bytes);
    } while (!mapped_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));

    void* base = nullptr;
    cudaError_t status = cudaSuccess;
    try {
      // Under this pool's device: on a thread with no context, cudart would
      // make GPU 0's primary context for the call, a GPU perhaps not in use.
      const detail::CurrentDevice current(device_);
      status = cudaMallocManaged(&base, bytes, cudaMemAttachGlobal);
    } catch (...) {
      mapped_.fetch_sub(bytes, std::memory_order_relaxed);
      throw;
    }
    if (status == cudaSuccess) return base;
    mapped_.fetch_sub(bytes, std::memory_order_relaxed);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky, but it would surface in the next unrelated check
      throw OutOfMemory(fmt::format("cudaMallocManaged (device {}): no memory for a slab of {} ({} mapped)", device_,
                                    format_bytes(bytes), format_bytes(now)),
                        bytes);
    }
    detail::check_cuda(status, "cudaMallocManaged");
    return nullptr;
  }

  void unmap(void* base, std::size_t bytes) noexcept override {
    cudaError_t status = cudaSuccess;
    try {
      const detail::CurrentDevice current(device_);
      status = cudaFree(base);
    } catch (const std::exception& e) {
      log().error("cudaMallocManaged (device {}): cudaFree({}) not called: {}", device_, base, e.what());
    }
    if (status != cudaSuccess && status != cudaErrorCudartUnloading)
      log().error("cudaMallocManaged (device {}): cudaFree({}) failed: {}", device_, base, cudaGetErrorString(status));
    mapped_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  MemoryKind kind() const noexcept override { return MemoryKind::managed; }
  int device() const noexcept override { return device_; }
  std::string name() const override { return "cudaMallocManaged"; }
  std::size_t capacity() const noexcept override { return capacity_; }

 private:
  int device_;
  std::size_t capacity_;
  std::atomic<std::size_t> mapped_{0};
};

cudaMemLocation location_of(int device) {
  cudaMemLocation location{};
  location.type = device == UnifiedPool::host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device == UnifiedPool::host ? 0 : device;
  return location;
}

#endif

SlabPool::Options slab_options(const UnifiedPool::Options& options) {
  SlabPool::Options slab;
  slab.slab_bytes = options.slab_bytes;
  // A per-thread cache would hand a block touched on one device to work on
  // another; without it, blocks migrate only where they are used.
  slab.thread_cache = false;
  slab.on_invalid_free = options.on_invalid_free;
  return slab;
}

}  // namespace

std::unique_ptr<SlabSource> make_managed_source(int device, double max_fraction) {
  if (!(max_fraction > 0.0 && max_fraction <= 1.0))
    throw UsageError(fmt::format("UnifiedPool: max_fraction {} is not in (0, 1]", max_fraction));
  require_device(device, "UnifiedPool");
#if FERRY_WITH_CUDA
  int supported = 0;
  detail::check_cuda(cudaDeviceGetAttribute(&supported, cudaDevAttrManagedMemory, device), "cudaDeviceGetAttribute");
  if (supported == 0)
    throw UsageError(fmt::format("UnifiedPool: CUDA device {} does not support managed memory", device));
  const cuda::DeviceInfo info = cuda::device_info(device);
  const auto capacity = static_cast<std::size_t>(static_cast<double>(info.free_bytes) * max_fraction);
  log().debug("UnifiedPool: device {} ({}), managed memory capped at {} of {} free", device, info.name,
              format_bytes(capacity), format_bytes(info.free_bytes));
  return std::make_unique<ManagedSource>(device, capacity);
#else
  return nullptr;  // unreachable: require_device has thrown
#endif
}

UnifiedPool::UnifiedPool(Options options)
    : SlabPool(make_managed_source(options.device, options.max_fraction), slab_options(options)) {}

namespace {

void require_range(const UnifiedPool& pool, const void* ptr, std::size_t bytes, int device, const char* who) {
  if (bytes == 0) return;
  const auto* first = static_cast<const unsigned char*>(ptr);
  if (!pool.owns(first) || !pool.owns(first + (bytes - 1)))
    throw UsageError(fmt::format("UnifiedPool::{}({}, {} bytes): the range is not inside this pool ({})", who, ptr,
                                 bytes, pool.describe()));
  if (device != UnifiedPool::host) require_device(device, "UnifiedPool");
}

}  // namespace

void UnifiedPool::prefetch(const void* ptr, std::size_t bytes, int device, StreamRef stream) const {
  require_range(*this, ptr, bytes, device, "prefetch");
  if (bytes == 0) return;
#if FERRY_WITH_CUDA
  const auto cuda_stream = static_cast<cudaStream_t>(stream.handle);
  // CUDA 13's form (the top-level CMakeLists.txt requires 13).
  detail::check_cuda(cudaMemPrefetchAsync(ptr, bytes, location_of(device), 0, cuda_stream), "cudaMemPrefetchAsync");
#else
  (void)stream;
#endif
}

void UnifiedPool::advise_preferred(const void* ptr, std::size_t bytes, int device) const {
  require_range(*this, ptr, bytes, device, "advise_preferred");
  if (bytes == 0) return;
#if FERRY_WITH_CUDA
  detail::check_cuda(cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, location_of(device)),
                     "cudaMemAdvise");
#endif
}

}  // namespace ferry
