// Stream-ordered GPU memory for one device, from a cudaMemPool of its own.
// The pool grows lazily and keeps freed memory for reuse, but the GPU is
// shared with other processes and with other allocators in this one
// (PyTorch, CuPy in the same notebook), so bytes in use are bounded by a
// fraction of the device, at the bound the runtime is asked to evict
// replicas before the request fails, and of the freed memory only a modest
// reserve (release_threshold_for) outlives a synchronisation. trim() gives
// that reserve back too; the GPU device calls it when it falls idle
// (IdleTrim) and when an allocation outside the pool fails.
//
// Declared on every build so user code compiles the same everywhere; without
// CUDA or without a device the constructor throws UsageError saying why.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "ferry/allocator/memory_resource.hpp"
#include "ferry/allocator/invalid_free.hpp"

namespace ferry {

class DevicePool : public MemoryResource {
 public:
  static constexpr std::size_t automatic_release_threshold = std::numeric_limits<std::size_t>::max();

  // The reserve kept by default: a sixteenth of the bound, between 64 MiB and
  // 1 GiB (never above the bound). Enough that task-sized blocks freed and
  // allocated again are not unmapped and remapped at every synchronisation;
  // little next to the tens of GiB a peak may have taken, which go back.
  // Inline: the policy is tested where no CUDA pool is built (the pool itself
  // lives in the CUDA module).
  static std::size_t release_threshold_for(std::size_t bound) noexcept {
    constexpr std::size_t floor = std::size_t{64} << 20, ceiling = std::size_t{1} << 30;
    return std::min(bound, std::clamp(bound / 16, floor, ceiling));
  }

  struct Options {
    int device = 0;
    // The bound on bytes in use, as a fraction of the device's total memory.
    double max_fraction = 0.8;
    // An explicit bound; when non-zero the smaller of the two applies.
    std::size_t max_bytes = 0;
    // Freed memory the pool keeps reserved for reuse instead of returning it
    // to the device at the next synchronisation; never more than the bound.
    // automatic_release_threshold: release_threshold_for(bound).
    std::size_t release_threshold = automatic_release_threshold;
    OnInvalidFree on_invalid_free = OnInvalidFree::build_default;
  };

  struct Stats {
    std::size_t bytes_in_use = 0;  // including padding for alignments above 256
    std::size_t peak_bytes = 0;
    std::size_t blocks_in_use = 0;
    std::size_t bound_bytes = 0;
    std::size_t release_threshold = 0;  // the one in force
    std::size_t reclaim_calls = 0;
    std::size_t trims = 0;
    std::size_t invalid_frees = 0;
  };

  // Given the bytes still missing, frees what it can (by evicting replicas
  // through this pool's deallocate) and returns the bytes it freed. Called
  // without any lock of the pool held.
  using ReclaimHandler = std::function<std::size_t(std::size_t needed)>;

  DevicePool() : DevicePool(Options{}) {}
  explicit DevicePool(Options options);
  ~DevicePool() override;

  void set_reclaim_handler(ReclaimHandler handler);

  // Waits for all work on the pool's device, so stream-ordered frees are done.
  void synchronize();
  // Returns reserved but unused memory to the device, for other processes
  // and other allocators in this one. Blocks in use are untouched.
  void trim();
  // Device memory the pool holds now: blocks in use and the reserve (asks CUDA).
  std::size_t reserved_bytes() const;
  // Lets GPU `reader` access the pool's blocks (peer copies and kernels);
  // needs peer access between the two (cudaDeviceCanAccessPeer).
  void grant_access(int reader);

  Stats stats() const;
  const Options& options() const noexcept;

  MemoryKind kind() const noexcept override { return MemoryKind::device; }
  int device() const noexcept override;
  std::string describe() const override;

 protected:
  // Ordered on `stream`: the memory may be used by work on that stream at once,
  // and by other streams only after synchronising with it.
  void* do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) override;
  // The memory returns to the pool once the work already queued on `stream` is done.
  void do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// When an idle GPU gives its pool's reserve back: once per idle spell,
// `delay` after the last task started. Decisions only; the caller owns the
// clock and the thread, so the policy is checkable without either.
class IdleTrim {
 public:
  using Clock = std::chrono::steady_clock;

  explicit IdleTrim(Clock::duration delay) : delay_(delay) {}

  void used(Clock::time_point now) noexcept {
    last_use_ = now;
    pending_ = true;
  }
  // True once `delay` has passed since the last use with no trim since.
  bool due(Clock::time_point now) const noexcept { return pending_ && now - last_use_ >= delay_; }
  void trimmed() noexcept { pending_ = false; }
  // How long a waiter may sleep before due() can turn true; nothing pending: forever.
  Clock::duration wait(Clock::time_point now) const noexcept {
    if (!pending_) return Clock::duration::max();
    const auto at = last_use_ + delay_;
    return at > now ? at - now : Clock::duration::zero();
  }

 private:
  Clock::duration delay_;
  Clock::time_point last_use_{};
  bool pending_ = false;
};

}  // namespace ferry
