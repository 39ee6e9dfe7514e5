// Own reductions (sum, and dot where cuBLAS cannot accumulate float in
// double): each block sums its share of a strided view in double and writes
// one partial; the host adds the partials.
#include <cstdint>

#include "launch.hpp"
#include "launch_kernel.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr unsigned warp_size = 32;

// The block's total, valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[block_threads / warp_size];
  for (unsigned offset = warp_size / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const unsigned lane = threadIdx.x % warp_size;
  const unsigned warp = threadIdx.x / warp_size;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    if (lane < block_threads / warp_size) v = warp_sums[lane];
    for (unsigned offset = warp_size / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

template <typename Term>
__global__ void __launch_bounds__(block_threads) reduce_view(std::size_t rows, std::size_t cols, Term term,
                                                             double* partials) {
  double total = 0;
  const std::size_t col_stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (std::size_t c = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; c < cols; c += col_stride) total += term(r, c);
  }
  total = block_sum(total);
  if (threadIdx.x == 0) partials[std::size_t{blockIdx.y} * gridDim.x + blockIdx.x] = total;
}

template <typename T>
struct SumTerm {
  View<const T> x;
  __device__ double operator()(std::size_t r, std::size_t c) const { return static_cast<double>(x.data[r * x.ld + c]); }
};

template <typename T>
struct DotTerm {
  View<const T> x;
  View<const T> y;
  __device__ double operator()(std::size_t r, std::size_t c) const {
    return static_cast<double>(x.data[r * x.ld + c]) * static_cast<double>(y.data[r * y.ld + c]);
  }
};

template <typename Term>
cudaError_t launch_reduce(std::size_t rows, std::size_t cols, Term term, ReduceGrid grid, double* partials,
                          cudaStream_t stream) {
  // Every partial is written, even for an empty view, so the host never adds garbage.
  return launch_kernel(reduce_view<Term>, dim3(grid.x, grid.y), dim3(block_threads), stream, rows, cols, term, partials);
}

}  // namespace

template <typename T>
cudaError_t launch_sum(View<const T> x, ReduceGrid grid, double* partials, cudaStream_t stream) {
  return launch_reduce(x.rows, x.cols, SumTerm<T>{x}, grid, partials, stream);
}

template <typename T>
cudaError_t launch_dot(View<const T> x, View<const T> y, ReduceGrid grid, double* partials, cudaStream_t stream) {
  return launch_reduce(x.rows, x.cols, DotTerm<T>{x, y}, grid, partials, stream);
}

template cudaError_t launch_sum<float>(View<const float>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_sum<double>(View<const double>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_sum<std::int32_t>(View<const std::int32_t>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_sum<std::int64_t>(View<const std::int64_t>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_sum<std::uint8_t>(View<const std::uint8_t>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_dot<float>(View<const float>, View<const float>, ReduceGrid, double*, cudaStream_t);
template cudaError_t launch_dot<double>(View<const double>, View<const double>, ReduceGrid, double*, cudaStream_t);

}  // namespace ferry::kernels::cuda
