// Where a unified buffer's pages are. Unified roots live in CUDA
// managed memory, addressable everywhere; these calls only move pages ahead
// of use so that neither side pays page faults. To the host goes through
// the data host (data/data_host.hpp: the core asks the CUDA module, which
// exists wherever a unified root is managed memory); the pool comes from the
// module; unified_to_device is the module's (its GPU device calls it).
#pragma once

#include <cstddef>
#include <memory>

#include "data/buffer_state.hpp"
#include "ferry/allocator/memory_resource.hpp"

namespace ferry::detail {

// The bytes a region spans in its root: from its first element to its last,
// whole rows of the root in between (a tile's neighbours come along; pages
// are the unit of migration anyway).
struct UnifiedSpan {
  const char* data = nullptr;
  std::size_t bytes = 0;
};
UnifiedSpan unified_span(const BufferRoot& root, const Region& region);

// Before host use of `region` of a unified root that a GPU used: its pages
// come back to the host, and the migration is complete on return.
void unified_to_host(BufferRoot& root, const Region& region);

// Before a task on GPU `device` uses `region`, ordered on `stream` (a
// cudaStream_t): the root is advised to live on that GPU, and the region's
// pages are prefetched there. The caller makes `device` current.
void unified_to_device(BufferRoot& root, const Region& region, int device, void* stream);

// Managed memory for unified buffers on `device`, capped below its free
// memory; throws UsageError without the CUDA module or without that device.
std::shared_ptr<MemoryResource> make_unified_memory(int device);

}  // namespace ferry::detail
