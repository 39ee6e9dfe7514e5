// One launch of an own kernel, returning that launch's status. cudaLaunchKernel
// answers for its own launch; cudaGetLastError after <<<>>> would also report
// an error some earlier, unchecked call left on this thread, and the task
// being launched would be blamed for it. For the .cu files only.
#pragma once

#include <cuda_runtime.h>

namespace ferry::kernels::cuda {

template <typename T>
struct exactly {
  using type = T;
};

// The arguments convert to the kernel's parameter types here, on the host,
// so each slot holds exactly what the kernel reads.
template <typename... Params>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                          typename exactly<Params>::type... args) {
  void* slots[] = {static_cast<void*>(&args)...};
  return cudaLaunchKernel(kernel, grid, block, slots, 0, stream);
}

}  // namespace ferry::kernels::cuda
