// The CUDA module's half of data/cuda_unified.hpp: moving a unified root's
// pages to the GPU that is about to use them.
#include <cuda_runtime_api.h>

#include "data/cuda_unified.hpp"
#include "devices/cuda/cuda_handles.hpp"

namespace ferry::detail {

namespace {

cudaMemLocation location_of(int device) {
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = device;
  return location;
}

}  // namespace

void unified_to_device(BufferRoot& root, const Region& region, int device, void* stream) {
  if (!root.unified) return;
  if (root.unified_advised.load(std::memory_order_acquire) != device && root.bytes != 0) {
    // Advice applies to the whole root: its home is the GPU that uses it,
    // which keeps a mapping to it, so a page touched there does not fault.
    check_cuda(cudaMemAdvise(root.host, root.bytes, cudaMemAdviseSetPreferredLocation, location_of(device)),
               "cudaMemAdvise (preferred location)");
    check_cuda(cudaMemAdvise(root.host, root.bytes, cudaMemAdviseSetAccessedBy, location_of(device)),
               "cudaMemAdvise (accessed by)");
    root.unified_advised.store(device, std::memory_order_release);
  }
  const UnifiedSpan span = unified_span(root, region);
  if (span.bytes != 0)
    check_cuda(cudaMemPrefetchAsync(span.data, span.bytes, location_of(device), 0, static_cast<cudaStream_t>(stream)),
               "cudaMemPrefetchAsync (to the GPU)");
  root.unified_device.store(device, std::memory_order_release);
}

}  // namespace ferry::detail
