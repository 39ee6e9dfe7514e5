// Pooled page-locked host memory: the home of every buffer's host replica,
// so that every transfer is DMA/RDMA-able without a staging copy.
#pragma once

#include <memory>

#include "ferry/allocator/slab_pool.hpp"

namespace ferry {

// Page-aligned mmap with a best-effort mlock: it never touches CUDA. A
// PinnedPool's own source turns to cudaHostAlloc when told a GPU is in use.
std::unique_ptr<SlabSource> make_pinned_source();
// Always mmap; `lock` asks for mlock (best effort: a low RLIMIT_MEMLOCK is logged once, not fatal).
std::unique_ptr<SlabSource> make_mmap_source(bool lock = true);

namespace detail {
class PinnedSource;
}

class PinnedPool : public SlabPool {
 public:
  PinnedPool() : PinnedPool(Options{}) {}
  explicit PinnedPool(Options options);
  PinnedPool(std::unique_ptr<SlabSource> source, Options options) : SlabPool(std::move(source), options) {}

  // A GPU is in use in this process (a runtime started CUDA device `device`):
  // new slabs come from cudaHostAlloc, falling back to mmap+mlock with
  // cudaHostRegister, and the slabs mapped so far are registered, all with
  // `device` current, so that no other GPU gets a CUDA context for them (the
  // memory is portable: every GPU reads it). The first call picks the device.
  // Does nothing without that CUDA device, or for a pool given its own source.
  void gpu_in_use(int device);

 private:
  PinnedPool(detail::PinnedSource* source, Options options);
  detail::PinnedSource* pinned_ = nullptr;
};

}  // namespace ferry
