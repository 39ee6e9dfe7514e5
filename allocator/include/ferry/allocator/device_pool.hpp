// Stream-ordered GPU memory for one device, from a cudaMemPool of its own
//. The pool grows lazily and keeps freed memory for reuse, but the
// GPU is shared with other processes, so bytes in use are bounded by a
// fraction of the device; at the bound the runtime is asked to evict replicas
// before the request fails.
//
// Declared on every build so user code compiles the same everywhere; without
// CUDA or without a device the constructor throws UsageError saying why.
#pragma once

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
  struct Options {
    int device = 0;
    // The bound on bytes in use, as a fraction of the device's total memory.
    double max_fraction = 0.8;
    // An explicit bound; when non-zero the smaller of the two applies.
    std::size_t max_bytes = 0;
    // Freed memory the pool keeps reserved for reuse instead of returning it
    // to the device at the next synchronisation; never more than the bound.
    std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
    OnInvalidFree on_invalid_free = OnInvalidFree::build_default;
  };

  struct Stats {
    std::size_t bytes_in_use = 0;  // including padding for alignments above 256
    std::size_t peak_bytes = 0;
    std::size_t blocks_in_use = 0;
    std::size_t bound_bytes = 0;
    std::size_t reclaim_calls = 0;
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
  // Returns reserved but unused memory to the device, for other processes.
  void trim();

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

}  // namespace ferry
