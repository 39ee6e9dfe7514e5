#include "ferry/detail/cuda_current_device.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "ferry/detail/cuda_check.hpp"

namespace ferry::detail {

namespace {

// The two driver calls, found through cudart: the module links no libcuda,
// so that it loads (and says "no NVIDIA driver found") where the driver is not.
struct ContextCalls {
  PFN_cuCtxGetCurrent_v4000 get = nullptr;
  PFN_cuCtxSetCurrent_v4000 set = nullptr;
};

template <typename Fn>
Fn entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  // 4000: both calls as CUDA 4.0 introduced them, the signature of the *_v4000 typedefs.
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 4000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

const ContextCalls& context_calls() {
  static const ContextCalls calls{entry_point<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent"),
                                  entry_point<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent")};
  return calls;
}

}  // namespace

CurrentDevice::CurrentDevice(int device) {
  const ContextCalls& calls = context_calls();
  if (calls.get == nullptr || calls.set == nullptr) {
    // Every driver a CUDA 13 runtime accepts has both; should one not, fall
    // back to device numbers (and to the old cost on a fresh thread).
    check_cuda(cudaGetDevice(&previous_device_), "cudaGetDevice");
    if (previous_device_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
    changed_ = previous_device_ != device;
    return;
  }
  // Before cuInit the driver answers CUDA_ERROR_NOT_INITIALIZED: no context then either.
  if (calls.get(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
  // With a context current, cudaGetDevice names its device; without one it
  // would say 0, which is not "device 0 is current".
  int now = -1;
  if (previous_ != nullptr && cudaGetDevice(&now) == cudaSuccess && now == device) return;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  changed_ = true;
}

CurrentDevice::~CurrentDevice() {
  if (!changed_) return;
  const ContextCalls& calls = context_calls();
  if (calls.set != nullptr) calls.set(previous_);  // nullptr: the thread had none, and has none again
  else cudaSetDevice(previous_device_);
}

}  // namespace ferry::detail
