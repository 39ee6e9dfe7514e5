// gesdd's and geqrf's parameters and the shapes they imply, as both their
// variants (CPU: cpu/linalg_decompositions.cpp, CUDA:
// cuda/linalg_decompositions.cpp) read them.
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

namespace qr_param {
inline constexpr std::size_t a = 0, q = 1, r = 2, complete = 3;
}

struct QrShape {
  std::size_t m = 0, n = 0;  // a is m x n
  std::size_t k = 0;         // min(m, n): the number of reflectors
  std::size_t q_cols = 0;    // q is m x q_cols (m when complete, else k)
  std::size_t r_rows = 0;    // r is r_rows x n (m when complete, else k)
};

QrShape qr_shape(const KernelArgs& args);

void register_linalg_decomposition_kernels(KernelRegistry& registry);

}  // namespace ferry::kernels
