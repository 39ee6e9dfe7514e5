#include "cuda_source/nvrtc_kernel.hpp"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "ferry/detail/cuda_check.hpp"
#include "ferry/error.hpp"
#include "cuda_source/nvrtc_compiler.hpp"

namespace ferry::detail {
namespace {

// Dynamic shared memory a kernel may use without opting in.
constexpr unsigned default_shared_limit = 48 * 1024;

struct Loaded {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  std::atomic<unsigned> shared_limit{default_shared_limit};
};

// One library per (device, compiled image). Never unloaded: launches may
// still be in flight, and unloading at exit would race the CUDA runtime's
// own teardown; a process defines few kernels.
class Libraries {
 public:
  Loaded& get(int device, const CompiledKernel& compiled) {
    std::lock_guard lock(mutex_);
    auto& slot = loaded_[{device, compiled.key}];
    if (slot) return *slot;
    auto loaded = std::make_unique<Loaded>();
    check_cuda(cudaLibraryLoadData(&loaded->library, compiled.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
               "cudaLibraryLoadData");
    const cudaError_t found = cudaLibraryGetKernel(&loaded->kernel, loaded->library, compiled.symbol.c_str());
    if (found != cudaSuccess) {
      cudaLibraryUnload(loaded->library);
      check_cuda(found, "cudaLibraryGetKernel");
    }
    slot = std::move(loaded);
    return *slot;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, std::string>, std::unique_ptr<Loaded>> loaded_;
};

Libraries& libraries() {
  static Libraries* const instance = new Libraries();  // never destroyed, see Libraries
  return *instance;
}

std::pair<int, int> compute_capability(int device) {
  static std::mutex mutex;
  static std::map<int, std::pair<int, int>> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  return known[device] = {major, minor};
}

void allow_shared(Loaded& loaded, int device, unsigned bytes) {
  if (bytes <= loaded.shared_limit.load(std::memory_order_acquire)) return;
  // The attribute is per device; raising it while another launch uses a
  // lower value is harmless, so a race only repeats the call.
  check_cuda(cudaKernelSetAttributeForDevice(loaded.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes), device),
             "cudaKernelSetAttributeForDevice(MaxDynamicSharedMemorySize)");
  unsigned current = loaded.shared_limit.load(std::memory_order_relaxed);
  while (current < bytes && !loaded.shared_limit.compare_exchange_weak(current, bytes, std::memory_order_acq_rel)) {
  }
}

// What one kernel has loaded, by device: after the first launch on a device
// the next ones neither hash the source nor look it up again.
struct Resolved {
  std::mutex mutex;
  std::map<int, Loaded*> by_device;  // Loaded lives as long as the process
};

Loaded& resolve(const CudaSource& source, Resolved& resolved, int device) {
  {
    std::lock_guard lock(resolved.mutex);
    if (auto it = resolved.by_device.find(device); it != resolved.by_device.end()) return *it->second;
  }
  const auto [major, minor] = compute_capability(device);
  const auto compiled = NvrtcCompiler::shared().compile(source, major, minor);
  Loaded& loaded = libraries().get(device, *compiled);
  std::lock_guard lock(resolved.mutex);
  resolved.by_device[device] = &loaded;
  return loaded;
}

}  // namespace

void compile_for_device(const CudaSource& source, int device) {
  const auto [major, minor] = compute_capability(device);
  NvrtcCompiler::shared().compile(source, major, minor);
}

KernelFn make_nvrtc_launcher(std::shared_ptr<const CudaSource> source, std::shared_ptr<const CudaSignature> signature) {
  return [source = std::move(source), signature = std::move(signature),
          resolved = std::make_shared<Resolved>()](ExecContext& ctx) {
    int device = ctx.device;
    if (device < 0) check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    Loaded& loaded = resolve(*source, *resolved, device);
    const CudaLaunch launch = resolve_launch(*signature, ctx.args);
    if (launch.shared_bytes > default_shared_limit) allow_shared(loaded, device, launch.shared_bytes);
    PackedArguments packed = pack_arguments(*signature, ctx.args);
    // A cudaKernel_t passed as the function is documented for cudaLaunchKernel (CUDA 12+).
    check_cuda(cudaLaunchKernel(reinterpret_cast<const void*>(loaded.kernel),
                                dim3(launch.grid[0], launch.grid[1], launch.grid[2]),
                                dim3(launch.block[0], launch.block[1], launch.block[2]), packed.pointers.data(),
                                launch.shared_bytes, static_cast<cudaStream_t>(ctx.stream)),
               "cudaLaunchKernel");
  };
}

}  // namespace ferry::detail
