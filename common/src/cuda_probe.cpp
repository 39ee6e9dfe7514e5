#include "ferry/cuda_probe.hpp"

#include <fmt/format.h>

#include "ferry/config.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ferry/detail/cuda_check.hpp"
#endif

namespace ferry {

#if FERRY_WITH_CUDA
namespace detail {
void check_cuda(cudaError_t status, const char* call, std::source_location where) {
  if (status == cudaSuccess) return;
  throw CudaError(fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(status), cudaGetErrorName(status),
                              where.file_name(), where.line()),
                  static_cast<int>(status));
}
}  // namespace detail
#endif

namespace cuda {

namespace {

struct Probe {
  int devices = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
#if FERRY_WITH_CUDA
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      p.reason = fmt::format("no CUDA device: {}", cudaGetErrorString(status));
      cudaGetLastError();  // clear the sticky-free error so later probes start clean
    } else if (count == 0) {
      p.reason = "no CUDA device: the driver reports none";
    } else {
      p.devices = count;
    }
#else
    p.reason = "no CUDA device: this build of Ferry has no CUDA support (FERRY_WITH_CUDA=OFF)";
#endif
    if (p.devices == 0) log().info("{}; using host memory and CPU execution", p.reason);
    return p;
  }();
  return result;
}

}  // namespace

int device_count() { return probe().devices; }

const std::string& unavailable_reason() { return probe().reason; }

DeviceInfo device_info(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count())
    throw UsageError(fmt::format("CUDA device {} does not exist ({} device(s){}{})", ordinal, device_count(),
                                 unavailable_reason().empty() ? "" : ": ", unavailable_reason()));
  DeviceInfo info;
  info.ordinal = ordinal;
#if FERRY_WITH_CUDA
  cudaDeviceProp prop{};
  detail::check_cuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  info.name = prop.name;
  info.total_bytes = prop.totalGlobalMem;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  int previous = 0;
  detail::check_cuda(cudaGetDevice(&previous), "cudaGetDevice");
  detail::check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
  std::size_t free_bytes = 0, total_bytes = 0;
  detail::check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  detail::check_cuda(cudaSetDevice(previous), "cudaSetDevice");
  info.free_bytes = free_bytes;
#endif
  return info;
}

}  // namespace cuda
}  // namespace ferry
