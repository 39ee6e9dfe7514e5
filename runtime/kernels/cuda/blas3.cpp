// gemm, trsm and syrk on a GPU through cuBLAS. cuBLAS is column-major and
// Ferry's views are row-major: a row-major M with leading dimension ld is,
// read column-major, M^T with the same ld. Each call below is the CPU's
// row-major call (cpu/gemm.cpp, cpu/cholesky.cpp) rewritten on transposes.
#include <cublas_v2.h>

#include "cpu/support.hpp"
#include "cuda/handles.hpp"
#include "cuda/variants.hpp"

namespace ferry::kernels::cuda {
namespace {

void blas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  check_cublas(cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), "cublasSgemm");
}
void blas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  check_cublas(cublasDgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), "cublasDgemm");
}

// Row-major B = B * L^-T with L lower is, on transposes, L * X^T = B^T: in
// column-major terms op(U) X' = B' with U = L^T upper and op the transpose,
// applied from the left with m and n swapped.
void blas_trsm(cublasHandle_t h, int m, int n, const float* l, int ldl, float* b, int ldb) {
  const float one = 1.0f;
  check_cublas(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, m, n, &one, l,
                           ldl, b, ldb),
               "cublasStrsm");
}
void blas_trsm(cublasHandle_t h, int m, int n, const double* l, int ldl, double* b, int ldb) {
  const double one = 1.0;
  check_cublas(cublasDtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, m, n, &one, l,
                           ldl, b, ldb),
               "cublasDtrsm");
}

// Row-major lower C -= A A^T is column-major upper C' -= A'^T A' (A' = A^T).
void blas_syrk(cublasHandle_t h, int n, int k, const float* a, int lda, float* c, int ldc) {
  const float minus_one = -1.0f, one = 1.0f;
  check_cublas(cublasSsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, n, k, &minus_one, a, lda, &one, c, ldc),
               "cublasSsyrk");
}
void blas_syrk(cublasHandle_t h, int n, int k, const double* a, int lda, double* c, int ldc) {
  const double minus_one = -1.0, one = 1.0;
  check_cublas(cublasDsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, n, k, &minus_one, a, lda, &one, c, ldc),
               "cublasDsyrk");
}

cublasOperation_t op(bool transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

// C = alpha op(A) op(B) + beta C row-major is C^T = alpha op(B)^T op(A)^T +
// beta C^T: the same call column-major with the operands swapped.
void gemm(ExecContext& ctx) {
  const GemmCall g = gemm_call(ctx.args);
  if (g.c.elements() == 0) return;
  dispatch_floating(g.c.dtype, "gemm", [&]<typename T>(std::type_identity<T>) {
    blas_gemm(cublas_handle(ctx), op(g.trans_b), op(g.trans_a), blas_int(g.c.cols), blas_int(g.c.rows), blas_int(g.k),
              static_cast<T>(g.alpha), g.b.as<T>(), leading_dim(g.b), g.a.as<T>(),
              leading_dim(g.a), static_cast<T>(g.beta), g.c.as<T>(), leading_dim(g.c));
  });
}

void trsm(ExecContext& ctx) {
  const BufferArg& l = ctx.args.buffer(0);
  const BufferArg& b = ctx.args.buffer(1);
  if (b.elements() == 0) return;
  dispatch_floating(b.dtype, "trsm", [&]<typename T>(std::type_identity<T>) {
    blas_trsm(cublas_handle(ctx), blas_int(b.cols), blas_int(b.rows), l.as<T>(), leading_dim(l), b.as<T>(),
              leading_dim(b));
  });
}

void syrk(ExecContext& ctx) {
  const BufferArg& a = ctx.args.buffer(0);
  const BufferArg& c = ctx.args.buffer(1);
  if (c.elements() == 0) return;
  dispatch_floating(c.dtype, "syrk", [&]<typename T>(std::type_identity<T>) {
    blas_syrk(cublas_handle(ctx), blas_int(c.rows), blas_int(a.cols), a.as<T>(), leading_dim(a), c.as<T>(),
              leading_dim(c));
  });
}

}  // namespace ferry::kernels::cuda
