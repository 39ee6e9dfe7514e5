// Slabs: the large regions a pool carves blocks from, where they come from,
// and who gets told about them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ferry/allocator/memory_resource.hpp"

namespace ferry {

struct Slab {
  void* base = nullptr;
  std::size_t bytes = 0;
  MemoryKind kind = MemoryKind::host_pinned;
  int device = -1;
};

// Subscribers learn of every slab once when it is added and once when it is
// returned (trim or pool destruction). The transport uses this to register
// each slab with UCX a single time; the allocator itself knows nothing of UCX.
// Callbacks run under the pool's lock: they must not call back into the pool.
class SlabObserver {
 public:
  virtual ~SlabObserver() = default;
  virtual void on_slab_added(const Slab& slab) = 0;
  virtual void on_slab_removed(const Slab& slab) = 0;
};

// Where a pool gets its slabs: cudaHostAlloc, mmap, cudaMallocManaged.
// Implementations return page-aligned memory and throw OutOfMemory.
class SlabSource {
 public:
  virtual ~SlabSource() = default;
  virtual void* map(std::size_t bytes) = 0;
  virtual void unmap(void* base, std::size_t bytes) noexcept = 0;
  virtual MemoryKind kind() const noexcept = 0;
  virtual int device() const noexcept { return -1; }
  // How the memory is obtained, e.g. "mmap+mlock" or "cudaHostAlloc".
  virtual std::string name() const = 0;
  // The most this source can hand out in all; pools refuse requests above it.
  virtual std::size_t capacity() const noexcept = 0;
};

}  // namespace ferry
