// Pooled CUDA managed (unified) memory, addressable from host and device and
// migrated on demand. The managed bytes are capped below the
// device's free memory, so that oversubscription never starts by accident.
//
// Declared on every build so user code compiles the same everywhere; without
// CUDA or without a device the constructor throws UsageError saying why.
#pragma once

#include <cstddef>
#include <memory>

#include "ferry/allocator/slab_pool.hpp"

namespace ferry {

// Slabs from cudaMallocManaged(cudaMemAttachGlobal). capacity() is
// `max_fraction` of the device's free memory when the source is made; map()
// throws OutOfMemory for a slab that would take the source above it.
std::unique_ptr<SlabSource> make_managed_source(int device = 0, double max_fraction = 0.8);

class UnifiedPool : public SlabPool {
 public:
  // Where prefetch() and advise_preferred() mean host memory.
  static constexpr int host = -1;

  struct Options {
    int device = 0;
    double max_fraction = 0.8;
    std::size_t slab_bytes = std::size_t{64} << 20;
    OnInvalidFree on_invalid_free = OnInvalidFree::build_default;
  };

  UnifiedPool() : UnifiedPool(Options{}) {}
  explicit UnifiedPool(Options options);

  // Migrates [ptr, ptr + bytes) to `device` (or `host`) ahead of use, ordered on `stream`.
  void prefetch(const void* ptr, std::size_t bytes, int device, StreamRef stream = {}) const;
  // Makes `device` (or `host`) the range's home: pages migrate there when
  // evicted or touched and stay there when possible.
  void advise_preferred(const void* ptr, std::size_t bytes, int device) const;
};

}  // namespace ferry
