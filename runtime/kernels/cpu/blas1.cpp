// BLAS level 1 on CPU: scal, dot, nrm2 through CBLAS; axpy as a loop (below).
#include <cblas.h>

#include <cmath>

#include "cpu/support.hpp"

namespace ferry::kernels {
namespace {

// Not cblas_?axpy: OpenBLAS's AVX-512 kernels (Zen 4, Skylake-X) compute
// the vector body with fused multiply-adds and the last few elements
// without, so an element's last bit depended on where a piece of the
// vector ended, and a task split into chunks (KernelDef::chunkable) did not
// give the whole task's bits. One expression per element is rounded the
// same way wherever the element falls; the loop is memory-bound, as BLAS's is.
template <typename T>
void axpy(int n, T alpha, const T* x, T* y) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}
// float and double entry points under one name, so kernels are written once.
void scal(int n, float alpha, float* x) { cblas_sscal(n, alpha, x, 1); }
void scal(int n, double alpha, double* x) { cblas_dscal(n, alpha, x, 1); }
// Float dot products go through cblas_dsdot, whose result is double; Debian's
// OpenBLAS still adds runs of 32 products in single precision (OpenBLAS #1329).
double dot(int n, const float* x, const float* y) { return cblas_dsdot(n, x, 1, y, 1); }
double dot(int n, const double* x, const double* y) { return cblas_ddot(n, x, 1, y, 1); }
double nrm2(int n, const float* x) { return cblas_snrm2(n, x, 1); }
double nrm2(int n, const double* x) { return cblas_dnrm2(n, x, 1); }

void validate_pair(const KernelArgs& args) {
  require_one_dtype(args, {"x", "y"});
  require_same_shape(args.buffer(0), "x", args.buffer(1), "y");
}

Cost blas1_cost(const KernelArgs& args, std::size_t buffers, double flops_per_element) {
  return Cost{flops_per_element * static_cast<double>(args.buffer(0).elements()), total_bytes(args, buffers)};
}

KernelDef make_axpy() {
  KernelDef k;
  k.name = "axpy";
  k.summary = "y += alpha * x";
  k.params = {buffer_param("x", AccessMode::read, floating), buffer_param("y", AccessMode::readwrite, floating),
              real_param("alpha", 1.0)};
  k.validate = validate_pair;
  k.cost = [](const KernelArgs& args) { return blas1_cost(args, 2, 2); };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const BufferArg& y = ctx.args.buffer(1);
    const double alpha = ctx.args.real(2);
    dispatch_floating(x.dtype, "axpy", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x, &y});
      for (std::size_t r = 0; r < s.count; ++r) axpy(blas_int(s.length), static_cast<T>(alpha), row<T>(x, r), row<T>(y, r));
    });
  };
  k.chunkable = true;
  return k;
}

KernelDef make_scal() {
  KernelDef k;
  k.name = "scal";
  k.summary = "x *= alpha";
  k.params = {buffer_param("x", AccessMode::readwrite, floating), real_param("alpha")};
  k.cost = [](const KernelArgs& args) { return blas1_cost(args, 1, 1); };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const double alpha = ctx.args.real(1);
    dispatch_floating(x.dtype, "scal", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x});
      for (std::size_t r = 0; r < s.count; ++r) scal(blas_int(s.length), static_cast<T>(alpha), row<T>(x, r));
    });
  };
  k.chunkable = true;
  return k;
}

KernelDef make_dot() {
  KernelDef k;
  k.name = "dot";
  k.summary = "sum of x[i] * y[i]";
  k.params = {buffer_param("x", AccessMode::read, floating), buffer_param("y", AccessMode::read, floating)};
  k.validate = validate_pair;
  k.cost = [](const KernelArgs& args) { return blas1_cost(args, 2, 2); };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const BufferArg& y = ctx.args.buffer(1);
    ctx.result = dispatch_floating(x.dtype, "dot", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x, &y});
      double total = 0;
      for (std::size_t r = 0; r < s.count; ++r) total += dot(blas_int(s.length), row<T>(x, r), row<T>(y, r));
      return total;
    });
  };
  k.returns_scalar = true;
  return k;
}

KernelDef make_nrm2() {
  KernelDef k;
  k.name = "nrm2";
  k.summary = "Euclidean norm of x";
  k.params = {buffer_param("x", AccessMode::read, floating)};
  k.cost = [](const KernelArgs& args) { return blas1_cost(args, 1, 2); };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    ctx.result = dispatch_floating(x.dtype, "nrm2", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x});
      double norm = 0;
      // hypot combines the per-row norms without the overflow of summing squares.
      for (std::size_t r = 0; r < s.count; ++r) norm = std::hypot(norm, nrm2(blas_int(s.length), row<T>(x, r)));
      return norm;
    });
  };
  k.returns_scalar = true;
  return k;
}

}  // namespace

void register_blas1_kernels(KernelRegistry& registry) {
  registry.add(make_axpy());
  registry.add(make_scal());
  registry.add(make_dot());
  registry.add(make_nrm2());
}

}  // namespace ferry::kernels
