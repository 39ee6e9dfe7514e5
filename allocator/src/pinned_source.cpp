// Where pinned slabs come from: cudaHostAlloc when a CUDA device is there to
// make them DMA-able, otherwise mmap with a best-effort mlock.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ferry {

namespace {

std::size_t physical_memory() noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

std::string memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  return limit.rlim_cur == RLIM_INFINITY ? "unlimited" : format_bytes(limit.rlim_cur);
}

class MmapSource final : public SlabSource {
 public:
  explicit MmapSource(bool lock) : lock_(lock), capacity_(physical_memory()) {}

  void* map(std::size_t bytes) override {
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      throw OutOfMemory(fmt::format("mmap of a {} slab failed: {}", format_bytes(bytes), std::strerror(err)), bytes);
    }
    if (lock_ && mlock(base, bytes) != 0) {
      const int err = errno;
      // Not fatal: the memory still works, and UCX pins what it registers.
      if (!warned_.exchange(true))
        log().info("mlock of a {} slab failed ({}; RLIMIT_MEMLOCK {}): pool memory stays pageable until registered",
                   format_bytes(bytes), std::strerror(err), memlock_limit());
    }
    return base;
  }

  void unmap(void* base, std::size_t bytes) noexcept override {
    if (munmap(base, bytes) != 0) log().error("munmap({}, {}) failed: {}", base, bytes, std::strerror(errno));
  }

  MemoryKind kind() const noexcept override { return lock_ ? MemoryKind::host_pinned : MemoryKind::host_pageable; }
  std::string name() const override { return lock_ ? "mmap+mlock" : "mmap"; }
  std::size_t capacity() const noexcept override { return capacity_; }

 private:
  bool lock_;
  std::size_t capacity_;
  std::atomic<bool> warned_{false};
};

#if FERRY_WITH_CUDA
class CudaHostSource final : public SlabSource {
 public:
  CudaHostSource() : capacity_(physical_memory()) {}

  void* map(std::size_t bytes) override {
    void* base = nullptr;
    // Portable: the memory counts as pinned for every device, not only the current one.
    const cudaError_t status = cudaHostAlloc(&base, bytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw OutOfMemory(fmt::format("cudaHostAlloc of a {} slab failed: {}", format_bytes(bytes),
                                    cudaGetErrorString(status)),
                        bytes);
    }
    return base;
  }

  void unmap(void* base, std::size_t) noexcept override {
    if (const cudaError_t status = cudaFreeHost(base); status != cudaSuccess)
      log().error("cudaFreeHost({}) failed: {}", base, cudaGetErrorString(status));
  }

  MemoryKind kind() const noexcept override { return MemoryKind::host_pinned; }
  std::string name() const override { return "cudaHostAlloc"; }
  std::size_t capacity() const noexcept override { return capacity_; }

 private:
  std::size_t capacity_;
};
#endif

}  // namespace

std::unique_ptr<SlabSource> make_mmap_source(bool lock) { return std::make_unique<MmapSource>(lock); }

std::unique_ptr<SlabSource> make_pinned_source() {
#if FERRY_WITH_CUDA
  if (cuda::device_count() > 0) return std::make_unique<CudaHostSource>();
#endif
  return make_mmap_source(true);
}

}  // namespace ferry
