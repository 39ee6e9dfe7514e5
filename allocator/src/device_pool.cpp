#include "ferry/allocator/device_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

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

// The few CUDA calls the pool makes. Without CUDA they are unreachable (the
// constructor has already thrown), but the bookkeeping around them is
// compiled on every build. Those that name no stream run with the pool's own
// device current: on a thread with no context, cudart would otherwise make
// GPU 0's primary context for them, a GPU the runtime may not use at all.
// Allocations and frees go where their stream is.
#if FERRY_WITH_CUDA

cudaStream_t to_cuda(StreamRef stream) { return static_cast<cudaStream_t>(stream.handle); }

void* create_pool(int device, std::size_t release_threshold) {
  const detail::CurrentDevice current(device);
  int supported = 0;
  detail::check_cuda(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device),
                     "cudaDeviceGetAttribute");
  if (supported == 0)
    throw UsageError(fmt::format("DevicePool: CUDA device {} does not support stream-ordered memory pools", device));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  detail::check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  // Without a threshold the pool hands freed memory back to the device at
  // every synchronisation, and each later allocation pays to map it again.
  std::uint64_t threshold = release_threshold;
  const cudaError_t status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (status != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    detail::check_cuda(status, "cudaMemPoolSetAttribute");
  }
  return pool;
}

void destroy_pool(int device, void* pool) noexcept {
  // Blocks still out keep the pool's memory alive until they are freed.
  cudaError_t status = cudaSuccess;
  try {
    const detail::CurrentDevice current(device);
    status = cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool));
  } catch (const std::exception& e) {
    log().error("DevicePool: cudaMemPoolDestroy not called: {}", e.what());
    return;
  }
  if (status != cudaSuccess && status != cudaErrorCudartUnloading)
    log().error("DevicePool: cudaMemPoolDestroy failed: {}", cudaGetErrorString(status));
}

// nullptr when the device is out of memory, so the caller can reclaim and retry.
void* pool_allocate(void* pool, std::size_t bytes, StreamRef stream) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr, bytes, static_cast<cudaMemPool_t>(pool), to_cuda(stream));
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but it would surface in the next unrelated check
    return nullptr;
  }
  detail::check_cuda(status, "cudaMallocFromPoolAsync");
  return ptr;
}

void pool_free(void* ptr, StreamRef stream) { detail::check_cuda(cudaFreeAsync(ptr, to_cuda(stream)), "cudaFreeAsync"); }

void trim_pool(int device, void* pool) {
  const detail::CurrentDevice current(device);
  detail::check_cuda(cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool), 0), "cudaMemPoolTrimTo");
}

std::size_t pool_reserved(void* pool) {
  std::uint64_t bytes = 0;
  detail::check_cuda(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool), cudaMemPoolAttrReservedMemCurrent, &bytes),
                     "cudaMemPoolGetAttribute");
  return static_cast<std::size_t>(bytes);
}

// Lets `reader` (another GPU) read and write blocks of the pool: pool memory
// is the owner's alone until said otherwise, whatever peer access is enabled.
void pool_grant_access(void* pool, int reader) {
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = reader;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  detail::check_cuda(cudaMemPoolSetAccess(static_cast<cudaMemPool_t>(pool), &access, 1), "cudaMemPoolSetAccess");
}

void synchronize_device(int device) {
  const detail::CurrentDevice current(device);
  detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

#else

[[noreturn]] void no_cuda() { throw UsageError(fmt::format("DevicePool: {}", cuda::unavailable_reason())); }
void* create_pool(int, std::size_t) { no_cuda(); }
void destroy_pool(int, void*) noexcept {}
void* pool_allocate(void*, std::size_t, StreamRef) { no_cuda(); }
void pool_free(void*, StreamRef) { no_cuda(); }
void trim_pool(int, void*) { no_cuda(); }
std::size_t pool_reserved(void*) { no_cuda(); }
void synchronize_device(int) { no_cuda(); }
void pool_grant_access(void*, int) { no_cuda(); }

#endif

std::size_t compute_bound(const DevicePool::Options& options, std::size_t total_bytes) {
  const auto by_fraction = static_cast<std::size_t>(static_cast<double>(total_bytes) * options.max_fraction);
  return options.max_bytes == 0 ? by_fraction : std::min(options.max_bytes, by_fraction);
}

}  // namespace

struct DevicePool::Impl {
  struct Block {
    void* base = nullptr;  // what the CUDA pool returned; differs from the key when padded for alignment
    std::size_t requested = 0;
    std::size_t reserved = 0;
  };

  Options options;
  std::size_t bound = 0;
  std::size_t release_threshold = 0;
  void* pool = nullptr;  // cudaMemPool_t
  std::atomic<std::size_t> in_use{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> reclaim_calls{0};
  std::atomic<std::size_t> trims{0};

  mutable std::mutex mutex;
  std::unordered_map<void*, Block> blocks;
  std::size_t invalid_frees = 0;
  ReclaimHandler reclaim;

  // Reserve before calling CUDA, so that two threads cannot both squeeze under the bound.
  bool reserve(std::size_t bytes) {
    std::size_t now = in_use.load(std::memory_order_relaxed);
    do {
      if (now > bound - bytes) return false;
    } while (!in_use.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    now += bytes;
    std::size_t high = peak.load(std::memory_order_relaxed);
    while (now > high && !peak.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
    }
    return true;
  }

  void release(std::size_t bytes) { in_use.fetch_sub(bytes, std::memory_order_relaxed); }

  void* try_allocate(std::size_t bytes, std::size_t reserved, std::size_t alignment, StreamRef stream) {
    if (!reserve(reserved)) return nullptr;
    void* base = nullptr;
    try {
      base = pool_allocate(pool, reserved, stream);
    } catch (...) {
      release(reserved);
      throw;
    }
    if (base == nullptr) {
      release(reserved);
      return nullptr;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(base);
    void* ptr = reinterpret_cast<void*>((address + alignment - 1) & ~(std::uintptr_t{alignment} - 1));
    try {
      const std::lock_guard lock(mutex);
      blocks.emplace(ptr, Block{base, bytes, reserved});
    } catch (...) {
      pool_free(base, stream);
      release(reserved);
      throw;
    }
    return ptr;
  }

  // What the handler must free for a retry to fit under the bound; the whole
  // request when the device itself ran out below the bound.
  std::size_t shortfall(std::size_t reserved) const {
    const std::size_t now = in_use.load(std::memory_order_relaxed);
    return now > bound - reserved ? now - (bound - reserved) : reserved;
  }
};

DevicePool::DevicePool(Options options) : impl_(std::make_unique<Impl>()) {
  if (!(options.max_fraction > 0.0 && options.max_fraction <= 1.0))
    throw UsageError(fmt::format("DevicePool: max_fraction {} is not in (0, 1]", options.max_fraction));
  const int count = cuda::device_count();
  if (options.device < 0 || options.device >= count) {
    if (count == 0)
      throw UsageError(fmt::format("DevicePool: CUDA device {} is not available: {}", options.device,
                                   cuda::unavailable_reason()));
    throw UsageError(fmt::format("DevicePool: CUDA device {} does not exist ({} device(s))", options.device, count));
  }
  const cuda::DeviceInfo info = cuda::device_info(options.device);
  impl_->options = options;
  impl_->bound = compute_bound(options, info.total_bytes);
  impl_->release_threshold = options.release_threshold == automatic_release_threshold
                                 ? release_threshold_for(impl_->bound)
                                 : std::min(options.release_threshold, impl_->bound);
  impl_->pool = create_pool(options.device, impl_->release_threshold);
  log().debug("DevicePool: device {} ({}), bound {} of {}, keeps up to {} of freed memory", options.device, info.name,
              format_bytes(impl_->bound), format_bytes(info.total_bytes), format_bytes(impl_->release_threshold));
}

DevicePool::~DevicePool() {
  const Stats s = stats();
  if (s.blocks_in_use != 0)
    log().warn("DevicePool(device {}): destroyed with {} block(s) ({}) not freed", impl_->options.device,
               s.blocks_in_use, format_bytes(s.bytes_in_use));
  destroy_pool(impl_->options.device, impl_->pool);
}

void DevicePool::set_reclaim_handler(ReclaimHandler handler) {
  const std::lock_guard lock(impl_->mutex);
  impl_->reclaim = std::move(handler);
}

void DevicePool::synchronize() { synchronize_device(impl_->options.device); }

void DevicePool::trim() {
  trim_pool(impl_->options.device, impl_->pool);
  impl_->trims.fetch_add(1, std::memory_order_relaxed);
}

std::size_t DevicePool::reserved_bytes() const { return pool_reserved(impl_->pool); }

void DevicePool::grant_access(int reader) { pool_grant_access(impl_->pool, reader); }

DevicePool::Stats DevicePool::stats() const {
  Stats s;
  s.bytes_in_use = impl_->in_use.load(std::memory_order_relaxed);
  s.peak_bytes = impl_->peak.load(std::memory_order_relaxed);
  s.bound_bytes = impl_->bound;
  s.release_threshold = impl_->release_threshold;
  s.reclaim_calls = impl_->reclaim_calls.load(std::memory_order_relaxed);
  s.trims = impl_->trims.load(std::memory_order_relaxed);
  const std::lock_guard lock(impl_->mutex);
  s.blocks_in_use = impl_->blocks.size();
  s.invalid_frees = impl_->invalid_frees;
  return s;
}

const DevicePool::Options& DevicePool::options() const noexcept { return impl_->options; }

int DevicePool::device() const noexcept { return impl_->options.device; }

std::string DevicePool::describe() const {
  const Stats s = stats();
  return fmt::format("DevicePool(device {}, cudaMemPool): {} in use of a {} bound in {} block(s), peak {}",
                     impl_->options.device, format_bytes(s.bytes_in_use), format_bytes(s.bound_bytes),
                     s.blocks_in_use, format_bytes(s.peak_bytes));
}

void* DevicePool::do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) {
  // The CUDA pool aligns to 256 bytes; a larger alignment is met by padding.
  const std::size_t padding = alignment > default_alignment ? alignment - default_alignment : 0;
  const std::size_t bound = impl_->bound;
  const bool fits = bytes <= bound && padding <= bound - bytes;
  // A zero-byte request still gets a distinct pointer.
  const std::size_t reserved = fits ? std::max<std::size_t>(bytes + padding, 1) : 0;
  if (!fits || reserved > bound)
    throw OutOfMemory(fmt::format("DevicePool: {} (alignment {}) exceeds the bound of {}: {}", format_bytes(bytes),
                                  alignment, format_bytes(bound), describe()),
                      bytes);

  if (void* ptr = impl_->try_allocate(bytes, reserved, alignment, stream)) return ptr;

  ReclaimHandler reclaim;
  {
    const std::lock_guard lock(impl_->mutex);
    reclaim = impl_->reclaim;
  }
  std::size_t freed = 0;
  if (reclaim) {
    impl_->reclaim_calls.fetch_add(1, std::memory_order_relaxed);
    freed = reclaim(impl_->shortfall(reserved));
    if (void* ptr = impl_->try_allocate(bytes, reserved, alignment, stream)) return ptr;
  }
  throw OutOfMemory(fmt::format("DevicePool: cannot allocate {} on device {}: {} of the {} bound in use{}: {}",
                                format_bytes(bytes), impl_->options.device, format_bytes(impl_->in_use.load()),
                                format_bytes(bound),
                                reclaim ? fmt::format(" after reclaiming {}", format_bytes(freed)) : std::string{},
                                describe()),
                    bytes);
}

void DevicePool::do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) {
  Impl::Block block;
  std::string problem;
  {
    const std::lock_guard lock(impl_->mutex);
    const auto it = impl_->blocks.find(ptr);
    if (it == impl_->blocks.end())
      problem = "was not allocated by this pool or was already freed";
    else if (it->second.requested != bytes)
      problem = fmt::format("was allocated with {} bytes, not {}", it->second.requested, bytes);
    if (!problem.empty()) {
      ++impl_->invalid_frees;
    } else {
      block = it->second;
      impl_->blocks.erase(it);
    }
  }
  if (!problem.empty()) {
    // The pool is left untouched either way: a guess at what was meant could free live memory.
    const std::string message =
        fmt::format("DevicePool: deallocate({}, {} bytes): the pointer {} ({})", ptr, bytes, problem, describe());
    if (throws_on_invalid_free(impl_->options.on_invalid_free)) throw UsageError(message);
    log().error("{}", message);
    return;
  }
  impl_->release(block.reserved);
  pool_free(block.base, stream);
}

}  // namespace ferry
