// gesdd's parameters and the shapes they imply, as both its variants (CPU:
// cpu/linalg_decompositions.cpp, CUDA: cuda/linalg_decompositions.cpp) read them.
#pragma once

#include <cstddef>

#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels {

namespace svd_param {
inline constexpr std::size_t a = 0, s = 1, u = 2, vt = 3, full_matrices = 4;
}

struct SvdShape {
  std::size_t m = 0, n = 0;  // a is m x n
  std::size_t k = 0;         // min(m, n): the number of singular values
  bool full = false;         // u is m x m and vt n x n (else m x k and k x n)
  std::size_t u_cols = 0, vt_rows = 0;
};

SvdShape svd_shape(const KernelArgs& args);

void register_linalg_decomposition_kernels(KernelRegistry& registry);

}  // namespace ferry::kernels
