// Where pinned slabs come from: mmap with a best-effort mlock, and
// cudaHostAlloc (through the CUDA module) once a GPU is in use.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/detail/cuda_driver.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

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

}  // namespace

namespace detail {

// The pinned pool's source. Until a GPU is in use it never touches CUDA:
// mmap with a best-effort mlock, so a CPU-only runtime creates no CUDA
// context (half a GiB of GPU memory per process, and a failure under
// exclusive-process compute mode). Once told a GPU is in use, new slabs come
// from cudaHostAlloc (portable), falling back to mmap+mlock+cudaHostRegister
// and then to mmap+mlock alone when the driver refuses, and the slabs mapped
// before are registered, so that copy engines read them without staging.
class PinnedSource final : public SlabSource {
 public:
  PinnedSource() : capacity_(physical_memory()) {}

  void* map(std::size_t bytes) override {
    const detail::CudaDriver* driver = driver_.load(std::memory_order_acquire);
    std::string error;
    if (driver != nullptr) {
      if (void* base = driver->host_alloc(bytes, device_, error)) {
        remember(base, bytes, How::cuda_host_alloc);
        return base;
      }
      if (!alloc_warned_.exchange(true))
        log().warn("{} of a {} slab failed; pinned slabs come from mmap+mlock+cudaHostRegister instead", error,
                   format_bytes(bytes));
    }
    void* base = mmap_.map(bytes);
    How how = How::mmap;
    if (driver != nullptr) how = register_slab(*driver, base, bytes) ? How::registered : How::mmap;
    remember(base, bytes, how);
    return base;
  }

  void unmap(void* base, std::size_t bytes) noexcept override {
    How how = How::mmap;
    {
      std::lock_guard lock(mutex_);
      if (auto it = slabs_.find(base); it != slabs_.end()) {
        how = it->second.how;
        slabs_.erase(it);
      }
    }
    const detail::CudaDriver* driver = driver_.load(std::memory_order_acquire);
    if (how == How::cuda_host_alloc) return driver->host_free(base, device_);
    if (how == How::registered) driver->host_unregister(base, device_);
    mmap_.unmap(base, bytes);
  }

  MemoryKind kind() const noexcept override { return MemoryKind::host_pinned; }
  std::string name() const override {
    return driver_.load(std::memory_order_acquire) != nullptr ? "cudaHostAlloc" : mmap_.name();
  }
  std::size_t capacity() const noexcept override { return capacity_; }

  void use_cuda(int device) {
    // Only asked once a GPU device exists: the module is loaded already.
    const detail::CudaDriver* driver = detail::cuda_driver();
    if (driver == nullptr || device < 0 || device >= cuda::device_count()) return;
    std::lock_guard lock(mutex_);
    if (driver_.load(std::memory_order_relaxed) != nullptr) return;
    device_ = device;  // published with driver_ below
    for (auto& [base, slab] : slabs_)
      if (slab.how == How::mmap && register_slab(*driver, base, slab.bytes)) slab.how = How::registered;
    driver_.store(driver, std::memory_order_release);
  }

 private:
  enum class How { mmap, registered, cuda_host_alloc };
  struct Mapped {
    How how;
    std::size_t bytes;
  };

  bool register_slab(const detail::CudaDriver& driver, void* base, std::size_t bytes) {
    std::string error;
    if (driver.host_register(base, bytes, device_, error)) return true;
    if (!register_warned_.exchange(true))
      log().info("{} of a {} slab failed: it stays mlock'ed and is copied through staging buffers", error,
                 format_bytes(bytes));
    return false;
  }

  void remember(void* base, std::size_t bytes, How how) {
    std::lock_guard lock(mutex_);
    slabs_[base] = Mapped{how, bytes};
  }

  std::size_t capacity_;
  MmapSource mmap_{true};
  std::atomic<const detail::CudaDriver*> driver_{nullptr};
  int device_ = -1;  // the GPU whose context the CUDA calls run in; set before driver_
  std::atomic<bool> alloc_warned_{false};
  std::atomic<bool> register_warned_{false};
  std::mutex mutex_;
  std::unordered_map<void*, Mapped> slabs_;
};

}  // namespace detail

using detail::PinnedSource;

std::unique_ptr<SlabSource> make_mmap_source(bool lock) { return std::make_unique<MmapSource>(lock); }

std::unique_ptr<SlabSource> make_pinned_source() { return std::make_unique<PinnedSource>(); }

PinnedPool::PinnedPool(Options options) : PinnedPool(new PinnedSource, options) {}

PinnedPool::PinnedPool(PinnedSource* source, Options options)
    : SlabPool(std::unique_ptr<SlabSource>(source), options), pinned_(source) {}

void PinnedPool::gpu_in_use(int device) {
  if (pinned_ != nullptr) pinned_->use_cuda(device);
}

}  // namespace ferry
