// Pooled page-locked host memory: the home of every buffer's host replica,
// so that every transfer is DMA/RDMA-able without a staging copy.
#pragma once

#include <memory>

#include "ferry/allocator/slab_pool.hpp"

namespace ferry {

// Slabs from cudaHostAlloc where a CUDA driver and device are present,
// otherwise page-aligned mmap with a best-effort mlock.
std::unique_ptr<SlabSource> make_pinned_source();
// Always mmap; `lock` asks for mlock (best effort: a low RLIMIT_MEMLOCK is logged once, not fatal).
std::unique_ptr<SlabSource> make_mmap_source(bool lock = true);

class PinnedPool : public SlabPool {
 public:
  PinnedPool() : PinnedPool(Options{}) {}
  explicit PinnedPool(Options options) : SlabPool(make_pinned_source(), options) {}
  PinnedPool(std::unique_ptr<SlabSource> source, Options options) : SlabPool(std::move(source), options) {}
};

}  // namespace ferry
