// A few lines of CUDA source that keep NVRTC busy for seconds, for the tests
// of the compile time limit: inlining a call tree that grows by a third with
// each level (2 to 5 s at depth 18, 10 to 30 s at 20 on the CI machine).
// The kernel is `heavy(float* y)`.
#pragma once

#include <string>

namespace ferry::testing {

inline std::string heavy_cuda_source(int depth) {
  return R"(
template <int N> struct Deep {
  __device__ static float f(float x) { return Deep<N - 1>::f(x * 1.0001f + N) + Deep<N - 2>::f(x); }
};
template <> struct Deep<0> { __device__ static float f(float x) { return x; } };
template <> struct Deep<1> { __device__ static float f(float x) { return x + 1; } };
extern "C" __global__ void heavy(float* y) { y[0] = Deep<)" +
         std::to_string(depth) + R"(>::f(y[0]); }
)";
}

}  // namespace ferry::testing
