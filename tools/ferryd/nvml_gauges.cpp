#include "nvml_gauges.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <memory>

namespace ferry::ferryd {

namespace {

// The part of NVML's C ABI used here, as nvml.h declares it (the header
// ships with the driver's development files, not with every toolkit, so it
// is not needed to build). These types and values are fixed by NVML's ABI.
using nvmlReturn_t = int;  // enum nvmlReturn_enum
constexpr nvmlReturn_t NVML_SUCCESS = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int NVML_TEMPERATURE_GPU = 0;  // enum nvmlTemperatureSensors_enum
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

template <typename Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

struct NvmlGauges::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*count)(unsigned int*);
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int);
};

NvmlGauges::NvmlGauges() {
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* error = dlerror();
    reason_ = fmt::format("libnvidia-ml.so.1 not found (no NVIDIA driver): {}", error != nullptr ? error : "");
    return;
  }
  auto api = std::make_unique<Api>(Api{
      symbol<decltype(Api::init)>(library_, "nvmlInit_v2"),
      symbol<decltype(Api::shutdown)>(library_, "nvmlShutdown"),
      symbol<decltype(Api::error_string)>(library_, "nvmlErrorString"),
      symbol<decltype(Api::count)>(library_, "nvmlDeviceGetCount_v2"),
      symbol<decltype(Api::handle)>(library_, "nvmlDeviceGetHandleByIndex_v2"),
      symbol<decltype(Api::utilization)>(library_, "nvmlDeviceGetUtilizationRates"),
      symbol<decltype(Api::memory)>(library_, "nvmlDeviceGetMemoryInfo"),
      symbol<decltype(Api::temperature)>(library_, "nvmlDeviceGetTemperature"),
      symbol<decltype(Api::name)>(library_, "nvmlDeviceGetName"),
  });
  if (!api->init || !api->shutdown || !api->error_string || !api->count || !api->handle || !api->utilization ||
      !api->memory || !api->temperature || !api->name) {
    reason_ = "libnvidia-ml.so.1 lacks an NVML function ferryd uses (a driver older than NVML's v2 API)";
  } else if (const nvmlReturn_t status = api->init(); status != NVML_SUCCESS) {
    reason_ = fmt::format("nvmlInit failed: {}", api->error_string(status));
  } else {
    api_ = api.release();
    return;
  }
  dlclose(library_);
  library_ = nullptr;
}

NvmlGauges::~NvmlGauges() {
  if (api_ != nullptr) api_->shutdown();
  delete api_;
  if (library_ != nullptr) dlclose(library_);
}

std::vector<NvmlGauges::Reading> NvmlGauges::read() const {
  std::vector<Reading> out;
  unsigned int count = 0;
  if (api_ == nullptr || api_->count(&count) != NVML_SUCCESS) return out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api_->handle(i, &device) != NVML_SUCCESS) continue;
    Reading r;
    r.index = i;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    r.model = api_->name(device, name, sizeof name) == NVML_SUCCESS ? name : "unknown";
    if (nvmlUtilization_t u{}; api_->utilization(device, &u) == NVML_SUCCESS) r.utilization = u.gpu / 100.0;
    if (nvmlMemory_t m{}; api_->memory(device, &m) == NVML_SUCCESS) {
      r.memory_used_bytes = static_cast<double>(m.used);
      r.memory_total_bytes = static_cast<double>(m.total);
    }
    if (unsigned int t = 0; api_->temperature(device, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS)
      r.temperature_celsius = t;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ferry::ferryd
