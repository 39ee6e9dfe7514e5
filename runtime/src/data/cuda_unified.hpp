// Where a unified buffer's pages are. Unified roots live in CUDA
// managed memory, addressable everywhere; these calls only move pages ahead
// of use so that neither side pays page faults. Compiled on every build:
// without CUDA they do nothing (no unified root is managed memory then).
#pragma once

#include <memory>

#include "data/buffer_state.hpp"
#include "ferry/allocator/memory_resource.hpp"

namespace ferry::detail {

// Before host use of `region` of a unified root that a GPU used: its pages
// come back to the host, and the migration is complete on return.
void unified_to_host(BufferRoot& root, const Region& region);

// Before a task on GPU `device` uses `region`, ordered on `stream` (a
// cudaStream_t): the root is advised to live on that GPU, and the region's
// pages are prefetched there. The caller makes `device` current.
void unified_to_device(BufferRoot& root, const Region& region, int device, void* stream);

// Managed memory for unified buffers on `device`, capped below its free
// memory; throws UsageError without CUDA or without that device.
std::shared_ptr<MemoryResource> make_unified_memory(int device);

}  // namespace ferry::detail
