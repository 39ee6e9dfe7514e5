// gesdd, syevd and geqrf on a GPU through cuSOLVER, with the CPU kernels'
// arguments and results (cpu/linalg_decompositions.cpp).
//
// gesdd uses the Jacobi SVD (gesvdj): cuSOLVER's QR-based gesvd takes only
// column-major matrices with m >= n, while gesvdj takes any shape. As on the
// CPU, row-major a (m x n) is column-major a^T = V S U^T, so gesvdj's U
// lands where the row-major vt belongs; its V (not V^T) is transposed into
// u with cuBLAS geam. syevd's column-major eigenvectors are the rows of a
// row-major matrix, so they are computed in scratch and transposed into v.
// geqrf factors a transposed copy of a (column-major a itself), then
// transposes r and q out of it; r's part below the diagonal is zeroed row
// by row.
// Both synchronize: a decomposition that did not converge must fail this
// task, as on the CPU, not a later one that reads its results.
#include "cpu/linalg_decompositions.hpp"

#include <cusolverDn.h>

#include <algorithm>

#include "cpu/support.hpp"
#include "cuda/handles.hpp"
#include "cuda/scratch.hpp"
#include "cuda/variants.hpp"
#include "ferry/detail/cuda_check.hpp"

namespace ferry::kernels::cuda {
namespace {

constexpr cusolverEigMode_t vectors = CUSOLVER_EIG_MODE_VECTOR;

int gesvdj_size(cusolverDnHandle_t h, int econ, int m, int n, const float* a, int lda, const float* s, const float* u,
                int ldu, const float* v, int ldv, gesvdjInfo_t p) {
  int lwork = 0;
  check_cusolver(cusolverDnSgesvdj_bufferSize(h, vectors, econ, m, n, a, lda, s, u, ldu, v, ldv, &lwork, p),
                 "cusolverDnSgesvdj_bufferSize");
  return lwork;
}
int gesvdj_size(cusolverDnHandle_t h, int econ, int m, int n, const double* a, int lda, const double* s,
                const double* u, int ldu, const double* v, int ldv, gesvdjInfo_t p) {
  int lwork = 0;
  check_cusolver(cusolverDnDgesvdj_bufferSize(h, vectors, econ, m, n, a, lda, s, u, ldu, v, ldv, &lwork, p),
                 "cusolverDnDgesvdj_bufferSize");
  return lwork;
}
void gesvdj(cusolverDnHandle_t h, int econ, int m, int n, float* a, int lda, float* s, float* u, int ldu, float* v,
            int ldv, float* work, int lwork, int* info, gesvdjInfo_t p) {
  check_cusolver(cusolverDnSgesvdj(h, vectors, econ, m, n, a, lda, s, u, ldu, v, ldv, work, lwork, info, p),
                 "cusolverDnSgesvdj");
}
void gesvdj(cusolverDnHandle_t h, int econ, int m, int n, double* a, int lda, double* s, double* u, int ldu, double* v,
            int ldv, double* work, int lwork, int* info, gesvdjInfo_t p) {
  check_cusolver(cusolverDnDgesvdj(h, vectors, econ, m, n, a, lda, s, u, ldu, v, ldv, work, lwork, info, p),
                 "cusolverDnDgesvdj");
}

int syevd_size(cusolverDnHandle_t h, int n, const float* a, int lda, const float* w) {
  int lwork = 0;
  check_cusolver(cusolverDnSsyevd_bufferSize(h, vectors, CUBLAS_FILL_MODE_UPPER, n, a, lda, w, &lwork),
                 "cusolverDnSsyevd_bufferSize");
  return lwork;
}
int syevd_size(cusolverDnHandle_t h, int n, const double* a, int lda, const double* w) {
  int lwork = 0;
  check_cusolver(cusolverDnDsyevd_bufferSize(h, vectors, CUBLAS_FILL_MODE_UPPER, n, a, lda, w, &lwork),
                 "cusolverDnDsyevd_bufferSize");
  return lwork;
}
void solver_syevd(cusolverDnHandle_t h, int n, float* a, int lda, float* w, float* work, int lwork, int* info) {
  check_cusolver(cusolverDnSsyevd(h, vectors, CUBLAS_FILL_MODE_UPPER, n, a, lda, w, work, lwork, info),
                 "cusolverDnSsyevd");
}
void solver_syevd(cusolverDnHandle_t h, int n, double* a, int lda, double* w, double* work, int lwork, int* info) {
  check_cusolver(cusolverDnDsyevd(h, vectors, CUBLAS_FILL_MODE_UPPER, n, a, lda, w, work, lwork, info),
                 "cusolverDnDsyevd");
}

// c (column-major rows x cols, ldc) = a^T (a column-major cols x rows, lda);
// with beta 0, b is not read and may be c.
void transpose(cublasHandle_t h, int rows, int cols, const float* a, int lda, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, &one, a, lda, &zero, c, ldc, c, ldc),
               "cublasSgeam");
}
void transpose(cublasHandle_t h, int rows, int cols, const double* a, int lda, double* c, int ldc) {
  const double one = 1.0, zero = 0.0;
  check_cublas(cublasDgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, &one, a, lda, &zero, c, ldc, c, ldc),
               "cublasDgeam");
}

int geqrf_size(cusolverDnHandle_t h, int m, int n, float* a, int lda) {
  int lwork = 0;
  check_cusolver(cusolverDnSgeqrf_bufferSize(h, m, n, a, lda, &lwork), "cusolverDnSgeqrf_bufferSize");
  return lwork;
}
int geqrf_size(cusolverDnHandle_t h, int m, int n, double* a, int lda) {
  int lwork = 0;
  check_cusolver(cusolverDnDgeqrf_bufferSize(h, m, n, a, lda, &lwork), "cusolverDnDgeqrf_bufferSize");
  return lwork;
}
void solver_geqrf(cusolverDnHandle_t h, int m, int n, float* a, int lda, float* tau, float* work, int lwork,
                  int* info) {
  check_cusolver(cusolverDnSgeqrf(h, m, n, a, lda, tau, work, lwork, info), "cusolverDnSgeqrf");
}
void solver_geqrf(cusolverDnHandle_t h, int m, int n, double* a, int lda, double* tau, double* work, int lwork,
                  int* info) {
  check_cusolver(cusolverDnDgeqrf(h, m, n, a, lda, tau, work, lwork, info), "cusolverDnDgeqrf");
}
int orgqr_size(cusolverDnHandle_t h, int m, int n, int k, const float* a, int lda, const float* tau) {
  int lwork = 0;
  check_cusolver(cusolverDnSorgqr_bufferSize(h, m, n, k, a, lda, tau, &lwork), "cusolverDnSorgqr_bufferSize");
  return lwork;
}
int orgqr_size(cusolverDnHandle_t h, int m, int n, int k, const double* a, int lda, const double* tau) {
  int lwork = 0;
  check_cusolver(cusolverDnDorgqr_bufferSize(h, m, n, k, a, lda, tau, &lwork), "cusolverDnDorgqr_bufferSize");
  return lwork;
}
void solver_orgqr(cusolverDnHandle_t h, int m, int n, int k, float* a, int lda, const float* tau, float* work,
                  int lwork, int* info) {
  check_cusolver(cusolverDnSorgqr(h, m, n, k, a, lda, tau, work, lwork, info), "cusolverDnSorgqr");
}
void solver_orgqr(cusolverDnHandle_t h, int m, int n, int k, double* a, int lda, const double* tau, double* work,
                  int lwork, int* info) {
  check_cusolver(cusolverDnDorgqr(h, m, n, k, a, lda, tau, work, lwork, info), "cusolverDnDorgqr");
}

// a's elements with rows packed (ld = cols), for the solver to overwrite.
template <typename T>
void pack(const BufferArg& a, T* out, cudaStream_t stream, const char* call) {
  detail::check_cuda(cudaMemcpy2DAsync(out, a.cols * sizeof(T), a.as<T>(), std::max(a.ld, a.cols) * sizeof(T),
                                       a.cols * sizeof(T), a.rows, cudaMemcpyDeviceToDevice, stream),
                     call);
}

int read_info(const StreamScratch& info, cudaStream_t stream) {
  int host_info = 0;
  detail::check_cuda(cudaMemcpyAsync(&host_info, info.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync");
  detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host_info;
}

class GesvdjParams {
 public:
  GesvdjParams() { check_cusolver(cusolverDnCreateGesvdjInfo(&params_), "cusolverDnCreateGesvdjInfo"); }
  ~GesvdjParams() { cusolverDnDestroyGesvdjInfo(params_); }
  GesvdjParams(const GesvdjParams&) = delete;
  GesvdjParams& operator=(const GesvdjParams&) = delete;
  gesvdjInfo_t get() const noexcept { return params_; }

 private:
  gesvdjInfo_t params_ = nullptr;
};

}  // namespace

void gesdd(ExecContext& ctx) {
  const SvdShape d = svd_shape(ctx.args);
  if (d.k == 0) {
    if (d.full) throw Error("gesdd: the square factors of an empty matrix are made on the CPU only");
    return;
  }
  const BufferArg& a = ctx.args.buffer(svd_param::a);
  const BufferArg& s = ctx.args.buffer(svd_param::s);
  const BufferArg& u = ctx.args.buffer(svd_param::u);
  const BufferArg& vt = ctx.args.buffer(svd_param::vt);
  const cudaStream_t stream = stream_of(ctx);
  const int info = dispatch_floating(a.dtype, "gesdd", [&]<typename T>(std::type_identity<T>) {
    const cusolverDnHandle_t handle = cusolver_handle(ctx);
    const int econ = d.full ? 0 : 1;
    // Column-major: the matrix is n x m (a^T); its U goes to vt, its V (m x
    // vcols) to scratch, then transposed into u.
    const int rows = blas_int(d.n), cols = blas_int(d.m), vcols = blas_int(d.u_cols);
    StreamScratch packed(ctx, d.m * d.n * sizeof(T), "gesdd");
    pack<T>(a, packed.as<T>(), stream, "cudaMemcpy2DAsync");
    StreamScratch v(ctx, d.m * d.u_cols * sizeof(T), "gesdd");
    const GesvdjParams params;
    const int lwork = gesvdj_size(handle, econ, rows, cols, packed.as<T>(), rows, s.as<T>(), vt.as<T>(),
                                  leading_dim(vt), v.as<T>(), cols, params.get());
    StreamScratch work(ctx, static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(T), "gesdd");
    StreamScratch device_info(ctx, sizeof(int), "gesdd");
    gesvdj(handle, econ, rows, cols, packed.as<T>(), rows, s.as<T>(), vt.as<T>(), leading_dim(vt), v.as<T>(), cols,
           work.as<T>(), lwork, device_info.as<int>(), params.get());
    // Row-major u (m x vcols) is column-major vcols x m: V^T.
    transpose(cublas_handle(ctx), vcols, cols, v.as<T>(), cols, u.as<T>(), leading_dim(u));
    return read_info(device_info, stream);
  });
  if (info > 0) throw Error("gesdd: the singular value decomposition did not converge (NaN or inf in a?)");
  if (info < 0) throw Error(fmt::format("gesdd: cuSOLVER rejected argument {}", -info));
}

void syevd(ExecContext& ctx) {
  const BufferArg& a = ctx.args.buffer(0);
  const BufferArg& w = ctx.args.buffer(1);
  const BufferArg& v = ctx.args.buffer(2);
  if (a.rows == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const int info = dispatch_floating(a.dtype, "syevd", [&]<typename T>(std::type_identity<T>) {
    const cusolverDnHandle_t handle = cusolver_handle(ctx);
    const int n = blas_int(a.rows);
    StreamScratch z(ctx, a.rows * a.rows * sizeof(T), "syevd");
    pack<T>(a, z.as<T>(), stream, "cudaMemcpy2DAsync");
    const int lwork = syevd_size(handle, n, z.as<T>(), n, w.as<T>());
    StreamScratch work(ctx, static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(T), "syevd");
    StreamScratch device_info(ctx, sizeof(int), "syevd");
    solver_syevd(handle, n, z.as<T>(), n, w.as<T>(), work.as<T>(), lwork, device_info.as<int>());
    transpose(cublas_handle(ctx), n, n, z.as<T>(), n, v.as<T>(), leading_dim(v));
    return read_info(device_info, stream);
  });
  if (info > 0) throw Error("syevd: the eigenvalue decomposition did not converge (NaN or inf in a?)");
  if (info < 0) throw Error(fmt::format("syevd: cuSOLVER rejected argument {}", -info));
}

void geqrf(ExecContext& ctx) {
  const QrShape d = qr_shape(ctx.args);
  if (d.k == 0) throw Error("geqrf: the factors of an empty matrix are made on the CPU only");
  const BufferArg& a = ctx.args.buffer(qr_param::a);
  const BufferArg& q = ctx.args.buffer(qr_param::q);
  const BufferArg& r = ctx.args.buffer(qr_param::r);
  const cudaStream_t stream = stream_of(ctx);
  const int info = dispatch_floating(a.dtype, "geqrf", [&]<typename T>(std::type_identity<T>) {
    const cusolverDnHandle_t handle = cusolver_handle(ctx);
    const cublasHandle_t blas = cublas_handle(ctx);
    const int m = blas_int(d.m), n = blas_int(d.n), k = blas_int(d.k);
    const int q_cols = blas_int(d.q_cols), r_rows = blas_int(d.r_rows);
    // Column-major a (m x n, ld m), with room for q's extra columns.
    StreamScratch w(ctx, d.m * std::max(d.n, d.q_cols) * sizeof(T), "geqrf");
    transpose(blas, m, n, a.as<T>(), leading_dim(a), w.as<T>(), m);
    StreamScratch tau(ctx, d.k * sizeof(T), "geqrf");
    StreamScratch device_info(ctx, sizeof(int), "geqrf");
    const int lwork = std::max(geqrf_size(handle, m, n, w.as<T>(), m),
                               orgqr_size(handle, m, q_cols, k, w.as<T>(), m, tau.as<T>()));
    StreamScratch work(ctx, static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(T), "geqrf");
    solver_geqrf(handle, m, n, w.as<T>(), m, tau.as<T>(), work.as<T>(), lwork, device_info.as<int>());
    // Row-major r (r_rows x n) is column-major n x r_rows: the transpose of
    // w's first r_rows rows; then the reflectors below the diagonal go.
    transpose(blas, n, r_rows, w.as<T>(), m, r.as<T>(), leading_dim(r));
    for (std::size_t i = 1; i < d.r_rows; ++i) {
      detail::check_cuda(
          cudaMemsetAsync(r.as<T>() + i * r.ld, 0, std::min(i, d.n) * sizeof(T), stream), "cudaMemsetAsync");
    }
    solver_orgqr(handle, m, q_cols, k, w.as<T>(), m, tau.as<T>(), work.as<T>(), lwork, device_info.as<int>());
    transpose(blas, q_cols, m, w.as<T>(), m, q.as<T>(), leading_dim(q));
    return read_info(device_info, stream);
  });
  if (info < 0) throw Error(fmt::format("geqrf: cuSOLVER rejected argument {}", -info));
}

}  // namespace ferry::kernels::cuda
