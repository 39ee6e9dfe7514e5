// The tile kernels of a right-looking Cholesky factorisation A = L * L^T
// (lower, row-major): potrf on a diagonal tile, trsm on the tiles below it,
// syrk and gemm for the trailing update.
#include <cblas.h>
#include <lapacke.h>

#include "cpu/support.hpp"

namespace ferry::kernels {
namespace {

// A row-major matrix is its transpose in column-major order, and A is
// symmetric, so LAPACK's column-major upper factor U (A = U^T U) lands
// exactly where the row-major lower factor L = U^T belongs. This avoids the
// transposed copy LAPACKE makes for LAPACK_ROW_MAJOR.
lapack_int potrf(lapack_int n, float* a, lapack_int lda) { return LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', n, a, lda); }
lapack_int potrf(lapack_int n, double* a, lapack_int lda) { return LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', n, a, lda); }

void trsm(int m, int n, const float* l, int ldl, float* b, int ldb) {
  cblas_strsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, m, n, 1.0f, l, ldl, b, ldb);
}
void trsm(int m, int n, const double* l, int ldl, double* b, int ldb) {
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, m, n, 1.0, l, ldl, b, ldb);
}

void syrk(int n, int k, const float* a, int lda, float* c, int ldc) {
  cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, k, -1.0f, a, lda, 1.0f, c, ldc);
}
void syrk(int n, int k, const double* a, int lda, double* c, int ldc) {
  cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, k, -1.0, a, lda, 1.0, c, ldc);
}

double cube(std::size_t n) { return static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n); }

KernelDef make_potrf() {
  KernelDef k;
  k.name = "potrf";
  k.summary = "Cholesky factor of a symmetric positive definite a: lower triangle becomes L with a = L * L^T";
  k.params = {buffer_param("a", AccessMode::readwrite, floating)};
  k.validate = [](const KernelArgs& args) { require_square(args.buffer(0), "a"); };
  k.cost = [](const KernelArgs& args) { return Cost{cube(args.buffer(0).rows) / 3.0, total_bytes(args, 1)}; };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& a = ctx.args.buffer(0);
    if (a.rows == 0) return;
    const lapack_int info = dispatch_floating(a.dtype, "potrf", [&]<typename T>(std::type_identity<T>) {
      return potrf(blas_int(a.rows), a.as<T>(), leading_dim(a));
    });
    if (info > 0) throw Error(fmt::format("potrf: the leading minor of order {} is not positive definite", info));
    if (info < 0) throw Error(fmt::format("potrf: LAPACK rejected argument {}", -info));
  };
  return k;
}

KernelDef make_trsm() {
  KernelDef k;
  k.name = "trsm";
  k.summary = "b = b * l^-T for lower triangular l (the panel update of tiled Cholesky)";
  k.params = {buffer_param("l", AccessMode::read, floating), buffer_param("b", AccessMode::readwrite, floating)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"l", "b"});
    const BufferArg& l = args.buffer(0);
    const BufferArg& b = args.buffer(1);
    require_square(l, "l");
    if (b.cols != l.rows) {
      throw UsageError(fmt::format("b is {} but l is {}: b needs {} columns", shape(b), shape(l), l.rows));
    }
  };
  k.cost = [](const KernelArgs& args) {
    const BufferArg& b = args.buffer(1);
    return Cost{static_cast<double>(b.rows) * static_cast<double>(b.cols) * static_cast<double>(b.cols),
                total_bytes(args, 2)};
  };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& l = ctx.args.buffer(0);
    const BufferArg& b = ctx.args.buffer(1);
    if (b.elements() == 0) return;
    dispatch_floating(b.dtype, "trsm", [&]<typename T>(std::type_identity<T>) {
      trsm(blas_int(b.rows), blas_int(b.cols), l.as<T>(), leading_dim(l), b.as<T>(), leading_dim(b));
    });
  };
  return k;
}

KernelDef make_syrk() {
  KernelDef k;
  k.name = "syrk";
  k.summary = "c = c - a * a^T on the lower triangle of c (the diagonal update of tiled Cholesky)";
  k.params = {buffer_param("a", AccessMode::read, floating), buffer_param("c", AccessMode::readwrite, floating)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"a", "c"});
    const BufferArg& a = args.buffer(0);
    const BufferArg& c = args.buffer(1);
    require_square(c, "c");
    if (a.rows != c.rows) {
      throw UsageError(fmt::format("a is {} but c is {}: a needs {} rows", shape(a), shape(c), c.rows));
    }
  };
  k.cost = [](const KernelArgs& args) {
    const BufferArg& a = args.buffer(0);
    return Cost{static_cast<double>(a.rows) * static_cast<double>(a.rows) * static_cast<double>(a.cols),
                total_bytes(args, 2)};
  };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& a = ctx.args.buffer(0);
    const BufferArg& c = ctx.args.buffer(1);
    if (c.elements() == 0) return;
    dispatch_floating(c.dtype, "syrk", [&]<typename T>(std::type_identity<T>) {
      syrk(blas_int(c.rows), blas_int(a.cols), a.as<T>(), leading_dim(a), c.as<T>(), leading_dim(c));
    });
  };
  return k;
}

}  // namespace

void register_cholesky_kernels(KernelRegistry& registry) {
  registry.add(make_potrf());
  registry.add(make_trsm());
  registry.add(make_syrk());
}

}  // namespace ferry::kernels
