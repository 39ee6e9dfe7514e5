#include "builtin.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "cpu/linalg_decompositions.hpp"
#include "cpu/support.hpp"
#include "cuda_port/cuda_module.hpp"
#include "ferry/config.hpp"

namespace ferry::detail {

void register_builtin_kernels(KernelRegistry& registry) {
  // The CPU files define each kernel whole but for its CUDA variant, which
  // lives in the CUDA module (cuBLAS, nvcc). Registering into a staging
  // registry first lets this one place attach forwarders to the variants;
  // the module is loaded only when one is first called (by a CUDA device).
  KernelRegistry staging;
  kernels::register_blas1_kernels(staging);
  kernels::register_gemm_kernels(staging);
  kernels::register_cholesky_kernels(staging);
  kernels::register_linalg_decomposition_kernels(staging);
  kernels::register_elementwise_kernels(staging);
  kernels::register_fused_kernels(staging);
  for (const std::string& name : staging.names()) {
    KernelDef def = *staging.find(name);
    if (config::with_cuda && std::ranges::find(cuda_builtin_variants, name) != std::end(cuda_builtin_variants)) {
      def.cuda = lazy_cuda_kernel(fmt::format("kernel {} (CUDA variant)", name),
                                  [name](const CudaModule& module) { return module.builtin_variant(name); });
    }
    registry.add(std::move(def));
  }
}

}  // namespace ferry::detail
