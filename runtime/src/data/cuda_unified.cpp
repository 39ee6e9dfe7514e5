#include "data/cuda_unified.hpp"

#include <fmt/format.h>

#include "cuda_port/cuda_module.hpp"
#include "data/data_host.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

bool whole(const BufferRoot& root, const Region& region) {
  return region.row0 == 0 && region.col0 == 0 && region.rows == root.rows && region.cols == root.cols;
}

}  // namespace

UnifiedSpan unified_span(const BufferRoot& root, const Region& region) {
  const std::size_t element = size_of(root.dtype);
  if (region.rows == 0 || region.cols == 0) return {};
  const std::size_t first = region.row0 * root.cols + region.col0;
  const std::size_t last = (region.row0 + region.rows - 1) * root.cols + region.col0 + region.cols;
  return {static_cast<const char*>(root.host) + first * element, (last - first) * element};
}

void unified_to_host(BufferRoot& root, const Region& region) {
  if (!root.unified) return;
  const int device = root.unified_device.load(std::memory_order_acquire);
  if (device < 0) return;
  if (const UnifiedSpan span = unified_span(root, region); span.bytes != 0)
    data_host().unified_to_host(span.data, span.bytes, device);
  // Only a whole-buffer move proves no page is left on the GPU; a tile's
  // move leaves the mark, so the next host use of another tile moves it too.
  int expected = device;
  if (whole(root, region)) root.unified_device.compare_exchange_strong(expected, -1, std::memory_order_acq_rel);
}

std::shared_ptr<MemoryResource> make_unified_memory(int device) {
  const CudaModule* module = cuda_module();
  if (module == nullptr)
    throw UsageError(fmt::format("unified memory on GPU {}: {}", device, cuda::unavailable_reason()));
  return module->unified_memory(device);
}

}  // namespace ferry::detail
