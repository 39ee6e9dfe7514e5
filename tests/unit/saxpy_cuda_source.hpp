// The CUDA source kernel the tests define most: `saxpy(n, a, x, y)` sets
// y[i] = a * x[i] + y[i] for i < n.
#pragma once

namespace ferry::testing {

inline constexpr const char* saxpy_cuda_source = R"(
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

}  // namespace ferry::testing
