#include "builtin.hpp"

#include "cpu/support.hpp"

namespace ferry::detail {

void register_builtin_kernels(KernelRegistry& registry) {
  kernels::register_blas1_kernels(registry);
  kernels::register_gemm_kernels(registry);
  kernels::register_cholesky_kernels(registry);
  kernels::register_elementwise_kernels(registry);
}

}  // namespace ferry::detail
