// The half of the CUDA module's interface that the lowest layers use: the
// device probe and page-locked host memory. libferry_cuda.so implements it
// (runtime/src/devices/cuda/module.cpp); common/src/cuda_probe.cpp loads the
// module and hands this out. Nothing here names a CUDA type, so the core
// libraries compile and link without the toolkit.
#pragma once

#include <cstddef>
#include <string>

#include "ferry/cuda_probe.hpp"

namespace ferry::detail {

class CudaDriver {
 public:
  // Devices the driver reports; zero with `reason` saying why.
  virtual int device_count(std::string& reason) const = 0;
  virtual cuda::DeviceInfo device_info(int ordinal) const = 0;

  // Page-locked, portable host memory (cudaHostAlloc). nullptr with `error`
  // set when the driver refuses (no context possible, exclusive-process mode).
  // Each call runs with `device` current, a GPU the runtime uses: on a thread
  // with no context, cudart would make one on GPU 0 for it.
  virtual void* host_alloc(std::size_t bytes, int device, std::string& error) const = 0;
  virtual void host_free(void* base, int device) const noexcept = 0;
  // Page-locks memory the caller mapped (cudaHostRegister, portable); false
  // with `error` set when refused.
  virtual bool host_register(void* base, std::size_t bytes, int device, std::string& error) const = 0;
  virtual void host_unregister(void* base, int device) const noexcept = 0;

 protected:
  ~CudaDriver() = default;
};

// The driver half of the loaded module, or nullptr when it is not loaded
// (cuda::module_status() says why). Loads the module on first use.
const CudaDriver* cuda_driver();

// A symbol of the loaded module, or nullptr. The runtime finds its own half
// of the interface this way.
void* cuda_module_symbol(const char* name);

}  // namespace ferry::detail

// What libferry_cuda.so exports, all extern "C": the Ferry version it was
// built for (the loader refuses another) and the two halves of the interface.
#define FERRY_CUDA_MODULE_VERSION_SYMBOL "ferry_cuda_module_version"
#define FERRY_CUDA_MODULE_DRIVER_SYMBOL "ferry_cuda_module_driver"
#define FERRY_CUDA_MODULE_RUNTIME_SYMBOL "ferry_cuda_module_runtime"
