// Own elementwise kernels: fill, map and the strided axpy, each a 2-D
// grid-stride loop over a row-major view (a contiguous call is one row).
#include <cstdint>

#include "launch.hpp"
#include "launch_kernel.cuh"

namespace ferry::kernels::cuda {
namespace {

// x covers a row's columns, y the rows; both stride, so any extent fits the
// grid limits (65535 blocks in y).
dim3 elementwise_grid(std::size_t rows, std::size_t cols) {
  constexpr std::size_t max_x = 65535, max_y = 65535;
  const std::size_t x = std::min<std::size_t>((cols + block_threads - 1) / block_threads, max_x);
  const std::size_t y = std::min<std::size_t>(rows, max_y);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <typename F>
__global__ void for_each_element(std::size_t rows, std::size_t cols, F f) {
  const std::size_t col_stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (std::size_t c = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; c < cols; c += col_stride) f(r, c);
  }
}

template <typename F>
cudaError_t launch_elementwise(std::size_t rows, std::size_t cols, F f, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return launch_kernel(for_each_element<F>, elementwise_grid(rows, cols), dim3(block_threads), stream, rows, cols, f);
}

template <typename T>
struct Fill {
  View<T> x;
  T value;
  __device__ void operator()(std::size_t r, std::size_t c) const { x.data[r * x.ld + c] = value; }
};

template <typename T>
struct Axpy {
  T alpha;
  View<const T> x;
  View<T> y;
  __device__ void operator()(std::size_t r, std::size_t c) const {
    T& out = y.data[r * y.ld + c];
    out = alpha * x.data[r * x.ld + c] + out;
  }
};

// float and double under one name, as std:: gives the CPU version.
__device__ float abs_of(float v) { return fabsf(v); }
__device__ double abs_of(double v) { return fabs(v); }
__device__ float sqrt_of(float v) { return sqrtf(v); }
__device__ double sqrt_of(double v) { return sqrt(v); }
__device__ float exp_of(float v) { return expf(v); }
__device__ double exp_of(double v) { return exp(v); }
__device__ float log_of(float v) { return logf(v); }
__device__ double log_of(double v) { return log(v); }

// The same formulas as the CPU map (cpu/elementwise.cpp), so results agree
// to the last few ulps of the device math library.
template <typename T> struct OpCopy { __device__ T operator()(T v) const { return v; } };
template <typename T> struct OpNeg { __device__ T operator()(T v) const { return -v; } };
template <typename T> struct OpAbs { __device__ T operator()(T v) const { return abs_of(v); } };
template <typename T> struct OpSqrt { __device__ T operator()(T v) const { return sqrt_of(v); } };
template <typename T> struct OpExp { __device__ T operator()(T v) const { return exp_of(v); } };
template <typename T> struct OpLog { __device__ T operator()(T v) const { return log_of(v); } };
template <typename T> struct OpSquare { __device__ T operator()(T v) const { return v * v; } };
template <typename T> struct OpRelu { __device__ T operator()(T v) const { return v > T(0) ? v : T(0); } };
template <typename T> struct OpSigmoid { __device__ T operator()(T v) const { return T(1) / (T(1) + exp_of(-v)); } };
template <typename T> struct OpScale {
  T alpha;
  __device__ T operator()(T v) const { return alpha * v; }
};

template <typename T, typename Op>
struct Map {
  View<const T> x;
  View<T> y;
  Op op;
  __device__ void operator()(std::size_t r, std::size_t c) const { y.data[r * y.ld + c] = op(x.data[r * x.ld + c]); }
};

template <typename T, typename Op>
cudaError_t launch_map_with(Op op, View<const T> x, View<T> y, cudaStream_t stream) {
  return launch_elementwise(y.rows, y.cols, Map<T, Op>{x, y, op}, stream);
}

}  // namespace

template <typename T>
cudaError_t launch_fill(View<T> x, T value, cudaStream_t stream) {
  return launch_elementwise(x.rows, x.cols, Fill<T>{x, value}, stream);
}

template <typename T>
cudaError_t launch_axpy(T alpha, View<const T> x, View<T> y, cudaStream_t stream) {
  return launch_elementwise(y.rows, y.cols, Axpy<T>{alpha, x, y}, stream);
}

template <typename T>
cudaError_t launch_map(MapOp op, T alpha, View<const T> x, View<T> y, cudaStream_t stream) {
  switch (op) {
    case MapOp::copy: return launch_map_with(OpCopy<T>{}, x, y, stream);
    case MapOp::neg: return launch_map_with(OpNeg<T>{}, x, y, stream);
    case MapOp::abs: return launch_map_with(OpAbs<T>{}, x, y, stream);
    case MapOp::sqrt: return launch_map_with(OpSqrt<T>{}, x, y, stream);
    case MapOp::exp: return launch_map_with(OpExp<T>{}, x, y, stream);
    case MapOp::log: return launch_map_with(OpLog<T>{}, x, y, stream);
    case MapOp::square: return launch_map_with(OpSquare<T>{}, x, y, stream);
    case MapOp::relu: return launch_map_with(OpRelu<T>{}, x, y, stream);
    case MapOp::sigmoid: return launch_map_with(OpSigmoid<T>{}, x, y, stream);
    case MapOp::scale: return launch_map_with(OpScale<T>{alpha}, x, y, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_fill<float>(View<float>, float, cudaStream_t);
template cudaError_t launch_fill<double>(View<double>, double, cudaStream_t);
template cudaError_t launch_fill<std::int32_t>(View<std::int32_t>, std::int32_t, cudaStream_t);
template cudaError_t launch_fill<std::int64_t>(View<std::int64_t>, std::int64_t, cudaStream_t);
template cudaError_t launch_fill<std::uint8_t>(View<std::uint8_t>, std::uint8_t, cudaStream_t);
template cudaError_t launch_axpy<float>(float, View<const float>, View<float>, cudaStream_t);
template cudaError_t launch_axpy<double>(double, View<const double>, View<double>, cudaStream_t);
template cudaError_t launch_map<float>(MapOp, float, View<const float>, View<float>, cudaStream_t);
template cudaError_t launch_map<double>(MapOp, double, View<const double>, View<double>, cudaStream_t);

}  // namespace ferry::kernels::cuda
