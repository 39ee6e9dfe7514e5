// libferry_cuda.so's entry points: the CUDA module's two interface halves
// (ferry/detail/cuda_driver.hpp, cuda_port/cuda_module.hpp) over the CUDA
// device, its kernels, NVRTC and the CUDA pools, which this library holds
// together with every CUDA library they link.
#include "cuda_port/cuda_module.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include "cuda/variants.hpp"
#include "cuda_source/nvrtc_kernel.hpp"
#include "devices/cuda/cuda_device.hpp"
#include "devices/cuda/cuda_handles.hpp"
#include "ferry/allocator/unified_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/detail/cuda_check.hpp"
#include "ferry/detail/cuda_driver.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

void check_cuda(cudaError_t status, const char* call, std::source_location where) {
  if (status == cudaSuccess) return;
  throw CudaError(fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(status), cudaGetErrorName(status),
                              where.file_name(), where.line()),
                  static_cast<int>(status));
}

namespace {

// Without a driver the CUDA runtime answers cudaErrorInsufficientDriver
// ("CUDA driver version is insufficient for CUDA runtime version") or
// cudaErrorNoDevice: words that send a user hunting for a driver update on
// a machine that has no driver at all. Say what is missing.
std::string no_device_reason(cudaError_t status) {
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver found (libcuda.so.1 is not installed)";
    dlclose(driver);
    int driver_version = 0, runtime_version = 0;
    if (status == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver_version) == cudaSuccess &&
        cudaRuntimeGetVersion(&runtime_version) == cudaSuccess && driver_version > 0)
      return fmt::format("the NVIDIA driver supports CUDA {}.{}, older than this build's CUDA runtime {}.{}",
                         driver_version / 1000, driver_version % 1000 / 10, runtime_version / 1000,
                         runtime_version % 1000 / 10);
  }
  return cudaGetErrorString(status);
}

class Driver final : public CudaDriver {
 public:
  int device_count(std::string& reason) const override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      reason = no_device_reason(status);
      cudaGetLastError();  // not sticky: later calls start clean
      return 0;
    }
    if (count == 0) reason = "the driver reports none";
    return count;
  }

  cuda::DeviceInfo device_info(int ordinal) const override {
    cuda::DeviceInfo info;
    info.ordinal = ordinal;
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    info.name = prop.name;
    info.total_bytes = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    CurrentDevice current(ordinal);
    std::size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    info.free_bytes = free_bytes;
    return info;
  }

  void* host_alloc(std::size_t bytes, int device, std::string& error) const override {
    void* base = nullptr;
    try {
      const CurrentDevice current(device);
      // Portable: pinned for every device, not only the current one.
      if (const cudaError_t status = cudaHostAlloc(&base, bytes, cudaHostAllocPortable); status != cudaSuccess) {
        cudaGetLastError();
        error = fmt::format("cudaHostAlloc: {}", cudaGetErrorString(status));
        return nullptr;
      }
    } catch (const std::exception& e) {
      error = e.what();
      return nullptr;
    }
    return base;
  }

  void host_free(void* base, int device) const noexcept override {
    try {
      const CurrentDevice current(device);
      cudaFreeHost(base);
    } catch (const std::exception&) {
      // No context to free it in: the process is shutting CUDA down, which frees it.
    }
  }

  bool host_register(void* base, std::size_t bytes, int device, std::string& error) const override {
    try {
      const CurrentDevice current(device);
      if (const cudaError_t status = cudaHostRegister(base, bytes, cudaHostRegisterPortable); status != cudaSuccess) {
        cudaGetLastError();
        error = fmt::format("cudaHostRegister: {}", cudaGetErrorString(status));
        return false;
      }
    } catch (const std::exception& e) {
      error = e.what();
      return false;
    }
    return true;
  }

  void host_unregister(void* base, int device) const noexcept override {
    try {
      const CurrentDevice current(device);
      cudaHostUnregister(base);
    } catch (const std::exception&) {
      // As in host_free: CUDA is going away, and the registration with it.
    }
  }
};

class Module final : public CudaModule {
 public:
  std::unique_ptr<Device> make_device(DeviceHost& runtime, DeviceId id, MemoryNodeId node,
                                      const GpuOptions& options) const override {
    CudaDeviceOptions gpu;
    gpu.ordinal = options.ordinal;
    gpu.memory_limit = options.memory_limit;
    gpu.streams = options.streams;
    gpu.chunk_bytes = options.chunk_bytes;
    gpu.slots = options.slots;
    return std::make_unique<CudaDevice>(runtime, id, node, gpu);
  }

  bool facts(const Device& device, GpuFacts& out) const override {
    const auto* gpu = dynamic_cast<const CudaDevice*>(&device);
    if (gpu == nullptr) return false;
    out.ordinal = gpu->ordinal();
    out.bytes_to_device = gpu->bytes_to_device();
    out.bytes_from_device = gpu->bytes_from_device();
    out.stream_ordered = gpu->stream_ordered();
    out.bytes_from_peers = gpu->bytes_from_peers();
    out.description = gpu->describe();
    return true;
  }

  bool adopt(Device& device, const BufferState& view, const void* source) const override {
    auto* gpu = dynamic_cast<CudaDevice*>(&device);
    if (gpu == nullptr) return false;
    gpu->adopt(view, source);
    return true;
  }

  KernelFn builtin_variant(std::string_view name) const override { return kernels::cuda::variant(name); }

  KernelFn nvrtc_launcher(std::shared_ptr<const CudaSource> source,
                          std::shared_ptr<const CudaSignature> signature) const override {
    return make_nvrtc_launcher(std::move(source), std::move(signature));
  }

  void compile_nvrtc(const CudaSource& source, int device) const override { compile_for_device(source, device); }

  std::shared_ptr<MemoryResource> unified_memory(int device) const override {
    UnifiedPool::Options options;
    options.device = device;
    return std::make_shared<UnifiedPool>(options);
  }

  void unified_to_host(const void* data, std::size_t bytes, int device) const override {
    CurrentDevice current(device);
    cudaMemLocation host{};
    host.type = cudaMemLocationTypeHost;
    // The calling thread's own stream: it orders this prefetch with nothing
    // but itself, and waiting on it waits for this migration only.
    check_cuda(cudaMemPrefetchAsync(data, bytes, host, 0, cudaStreamPerThread), "cudaMemPrefetchAsync (to the host)");
    check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize (after a prefetch to the host)");
  }
};

const Driver the_driver{};
const Module the_module{};

}  // namespace
}  // namespace ferry::detail

extern "C" {
__attribute__((visibility("default"))) const char* ferry_cuda_module_version() { return ferry::config::version; }
__attribute__((visibility("default"))) const ferry::detail::CudaDriver* ferry_cuda_module_driver() {
  return &ferry::detail::the_driver;
}
__attribute__((visibility("default"))) const ferry::detail::CudaModule* ferry_cuda_module_runtime() {
  return &ferry::detail::the_module;
}
}
