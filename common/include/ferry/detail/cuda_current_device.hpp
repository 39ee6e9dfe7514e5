// Only for the CUDA module's translation units (libferry_cuda.so, which
// defines it in runtime/src/devices/cuda/current_device.cpp): the
// current-device guard every entry point takes. CUDA's current device is per
// thread, and the coherence layer and the pools call into a GPU from any
// thread. Not installed: it names CUDA types.
#pragma once

#include <cuda.h>  // CUcontext, a type only: the module reaches the driver through cudart's entry points

namespace ferry::detail {

// Makes `device` current for a scope and, on leaving, gives the thread back
// exactly the context it had. Since CUDA 12, cudaSetDevice creates and binds
// the device's primary context (about half a GiB of GPU memory), and
// cudaGetDevice answers 0 on a thread with no context at all, so "restore the
// device cudaGetDevice gave" would put a context on GPU 0 for every fresh
// thread that ever called in, GPUs the runtime was told not to use included.
// The guard therefore asks the driver which context is current
// (cuCtxGetCurrent) and restores that, "none" included (cuCtxSetCurrent(nullptr)).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  CUcontext previous_ = nullptr;
  int previous_device_ = -1;  // only where the driver gives no cuCtxGetCurrent (see the .cpp)
  bool changed_ = false;
};

}  // namespace ferry::detail
