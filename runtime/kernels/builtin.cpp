#include "builtin.hpp"

#include <string>
#include <utility>

#include "cpu/support.hpp"
#include "ferry/config.hpp"
#if FERRY_WITH_CUDA
#include "cuda/variants.hpp"
#endif

namespace ferry::detail {

void register_builtin_kernels(KernelRegistry& registry) {
  // The CPU files define each kernel whole but for its CUDA variant, which
  // lives apart (cuBLAS, nvcc) and only in CUDA builds. Registering into a
  // staging registry first lets this one place attach the variants.
  KernelRegistry staging;
  kernels::register_blas1_kernels(staging);
  kernels::register_gemm_kernels(staging);
  kernels::register_cholesky_kernels(staging);
  kernels::register_elementwise_kernels(staging);
  kernels::register_fused_kernels(staging);
  for (const std::string& name : staging.names()) {
    KernelDef def = *staging.find(name);
#if FERRY_WITH_CUDA
    def.cuda = kernels::cuda::variant(name);
#endif
    registry.add(std::move(def));
  }
}

}  // namespace ferry::detail
