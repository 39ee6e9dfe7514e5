// CUDA devices as ferry::cuda sees them; the probe itself copes with builds
// without CUDA and machines without a driver.
#include <exception>

#include "ferry/cuda_probe.hpp"
#include "probes.hpp"

namespace ferry::tools {

nlohmann::ordered_json probe_cuda() {
  nlohmann::ordered_json cuda = {{"devices", nlohmann::ordered_json::array()}};
  const int count = ferry::cuda::device_count();
  if (count == 0) {
    cuda["error"] = ferry::cuda::unavailable_reason();
    return cuda;
  }
  for (int i = 0; i < count; ++i) {
    try {
      const auto info = ferry::cuda::device_info(i);
      cuda["devices"].push_back(
          {{"ordinal", info.ordinal},
           {"name", info.name},
           {"total_bytes", info.total_bytes},
           {"free_bytes", info.free_bytes},
           {"compute_capability", std::to_string(info.compute_major) + "." + std::to_string(info.compute_minor)},
           {"multiprocessors", info.multiprocessors}});
    } catch (const std::exception& e) {
      cuda["devices"].push_back({{"ordinal", i}, {"error", e.what()}});
    }
  }
  return cuda;
}

}  // namespace ferry::tools
