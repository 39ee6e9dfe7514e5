// What the own CUDA kernels (elementwise.cu, reduce.cu) offer the host code:
// plain launch functions over row-major strided views. The .cu files need
// nothing of Ferry and the host files nothing of nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "../map_op.hpp"

namespace ferry::kernels::cuda {

// rows x cols elements, ld elements between row starts. A call whose buffers
// are all contiguous arrives as one long row, as on the CPU.
template <typename T>
struct View {
  T* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t ld = 0;
};

using ferry::kernels::MapOp;  // map_op.hpp: the names are parsed on the host

inline constexpr unsigned block_threads = 256;

// Each launch returns the launch's own status; the work runs later on `stream`.
template <typename T>
cudaError_t launch_fill(View<T> x, T value, cudaStream_t stream);
template <typename T>
cudaError_t launch_map(MapOp op, T alpha, View<const T> x, View<T> y, cudaStream_t stream);
template <typename T>
cudaError_t launch_axpy(T alpha, View<const T> x, View<T> y, cudaStream_t stream);

// A reduction leaves one double per block in `partials`; the host adds them
// in a fixed order, so a result does not change from run to run.
struct ReduceGrid {
  unsigned x = 1;
  unsigned y = 1;
  std::size_t blocks() const noexcept { return std::size_t{x} * y; }
};

// About a thousand blocks fill any current GPU; more would only lengthen the
// host's final sum. Wide views spread over x, tall ones over y.
inline ReduceGrid reduce_grid(std::size_t rows, std::size_t cols) {
  constexpr std::size_t max_blocks = 1024;
  const std::size_t x = std::clamp<std::size_t>((cols + block_threads - 1) / block_threads, 1, max_blocks);
  const std::size_t y = std::clamp<std::size_t>(rows, 1, std::max<std::size_t>(1, max_blocks / x));
  return {static_cast<unsigned>(x), static_cast<unsigned>(y)};
}

template <typename T>
cudaError_t launch_sum(View<const T> x, ReduceGrid grid, double* partials, cudaStream_t stream);
// Products and sums in double: float inputs give what cblas_dsdot gives.
template <typename T>
cudaError_t launch_dot(View<const T> x, View<const T> y, ReduceGrid grid, double* partials, cudaStream_t stream);

}  // namespace ferry::kernels::cuda
