// The CUDA module and CUDA devices as ferry::cuda sees them; the probe
// itself copes with builds without CUDA, a missing or unloadable module and
// machines without a driver.
#include <exception>

#include "ferry/cuda_probe.hpp"
#include "probes.hpp"

namespace ferry::tools {

nlohmann::ordered_json probe_cuda() {
  const ferry::cuda::ModuleStatus& module = ferry::cuda::module_status();
  nlohmann::ordered_json cuda = {{"module", {{"state", ferry::cuda::to_string(module.state)}}},
                                 {"devices", nlohmann::ordered_json::array()}};
  if (!module.path.empty()) cuda["module"]["path"] = module.path;
  if (!module.detail.empty()) cuda["module"]["detail"] = module.detail;
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
