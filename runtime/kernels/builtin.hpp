// The built-in kernel library: blas1, gemm, the Cholesky set,
// elementwise map/reduce, fill and copy, and the fused elementwise programs.
#pragma once

namespace ferry {
class KernelRegistry;
}

namespace ferry::detail {

// Called once by KernelRegistry::global(); throws UsageError if a built-in
// clashes with a kernel already in `registry`.
void register_builtin_kernels(KernelRegistry& registry);

}  // namespace ferry::detail
