#include "data/cuda_unified.hpp"

#include <fmt/format.h>

#include "ferry/allocator/unified_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/error.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "devices/cuda/cuda_handles.hpp"
#endif

namespace ferry::detail {

namespace {

bool whole(const BufferRoot& root, const Region& region) {
  return region.row0 == 0 && region.col0 == 0 && region.rows == root.rows && region.cols == root.cols;
}

#if FERRY_WITH_CUDA

// The bytes a region spans in its root: from its first element to its last,
// whole rows of the root in between (a tile's neighbours come along; pages
// are the unit of migration anyway).
struct Span {
  const char* data = nullptr;
  std::size_t bytes = 0;
};

Span span_of(const BufferRoot& root, const Region& region) {
  const std::size_t element = size_of(root.dtype);
  if (region.rows == 0 || region.cols == 0) return {};
  const std::size_t first = region.row0 * root.cols + region.col0;
  const std::size_t last = (region.row0 + region.rows - 1) * root.cols + region.col0 + region.cols;
  return {static_cast<const char*>(root.host) + first * element, (last - first) * element};
}

cudaMemLocation location_of(int device) {
  cudaMemLocation location{};
  location.type = device < 0 ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device < 0 ? 0 : device;
  return location;
}

#endif

}  // namespace

void unified_to_host(BufferRoot& root, const Region& region) {
  if (!root.unified) return;
  const int device = root.unified_device.load(std::memory_order_acquire);
  if (device < 0) return;
#if FERRY_WITH_CUDA
  const Span span = span_of(root, region);
  if (span.bytes == 0) return;
  CurrentDevice current(device);
  // The calling thread's own stream: it orders this prefetch with nothing
  // but itself, and waiting on it waits for this migration only.
  check_cuda(cudaMemPrefetchAsync(span.data, span.bytes, location_of(-1), 0, cudaStreamPerThread),
             "cudaMemPrefetchAsync (to the host)");
  check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize (after a prefetch to the host)");
#endif
  // Only a whole-buffer move proves no page is left on the GPU; a tile's
  // move leaves the mark, so the next host use of another tile moves it too.
  int expected = device;
  if (whole(root, region)) root.unified_device.compare_exchange_strong(expected, -1, std::memory_order_acq_rel);
}

void unified_to_device(BufferRoot& root, const Region& region, int device, void* stream) {
  if (!root.unified) return;
#if FERRY_WITH_CUDA
  if (root.unified_advised.load(std::memory_order_acquire) != device && root.bytes != 0) {
    // Advice applies to the whole root: its home is the GPU that uses it,
    // which keeps a mapping to it, so a page touched there does not fault.
    check_cuda(cudaMemAdvise(root.host, root.bytes, cudaMemAdviseSetPreferredLocation, location_of(device)),
               "cudaMemAdvise (preferred location)");
    check_cuda(cudaMemAdvise(root.host, root.bytes, cudaMemAdviseSetAccessedBy, location_of(device)),
               "cudaMemAdvise (accessed by)");
    root.unified_advised.store(device, std::memory_order_release);
  }
  const Span span = span_of(root, region);
  if (span.bytes != 0)
    check_cuda(cudaMemPrefetchAsync(span.data, span.bytes, location_of(device), 0, static_cast<cudaStream_t>(stream)),
               "cudaMemPrefetchAsync (to the GPU)");
  root.unified_device.store(device, std::memory_order_release);
#else
  (void)region;
  (void)device;
  (void)stream;
#endif
}

std::shared_ptr<MemoryResource> make_unified_memory(int device) {
  UnifiedPool::Options options;
  options.device = device;
  return std::make_shared<UnifiedPool>(options);
}

}  // namespace ferry::detail
