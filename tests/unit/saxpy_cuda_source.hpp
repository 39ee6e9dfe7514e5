// The CUDA source kernel the tests define most: `saxpy(n, a, x, y)` sets
// y[i] = a * x[i] + y[i] for i < n.
#pragma once

#include <cstddef>

namespace ferry::testing {

inline constexpr const char* saxpy_cuda_source = R"(
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

// x[i] = i and y[i] = 1 (host replicas of float buffers): after saxpy with
// a, then with b, y[i] is (a + b) * i + 1.
template <typename FloatBuffer>
void fill_saxpy_inputs(FloatBuffer& x, FloatBuffer& y, std::size_t n) {
  auto hx = x.host();
  auto hy = y.host();
  for (std::size_t i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i);
    hy[i] = 1.0f;
  }
}

}  // namespace ferry::testing
