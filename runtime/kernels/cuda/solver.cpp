// potrf on a GPU through cuSOLVER. As on the CPU (cpu/cholesky.cpp): a
// row-major lower factor is a column-major upper one, and A is symmetric, so
// cuSOLVER's upper Cholesky of the column-major view writes L in place.
#include <cusolverDn.h>

#include <algorithm>

#include "cpu/support.hpp"
#include "cuda/handles.hpp"
#include "cuda/scratch.hpp"
#include "cuda/variants.hpp"
#include "ferry/detail/cuda_check.hpp"

namespace ferry::kernels::cuda {
namespace {

int workspace_size(cusolverDnHandle_t h, int n, float* a, int lda) {
  int lwork = 0;
  check_cusolver(cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_UPPER, n, a, lda, &lwork),
                 "cusolverDnSpotrf_bufferSize");
  return lwork;
}
int workspace_size(cusolverDnHandle_t h, int n, double* a, int lda) {
  int lwork = 0;
  check_cusolver(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_UPPER, n, a, lda, &lwork),
                 "cusolverDnDpotrf_bufferSize");
  return lwork;
}
void solver_potrf(cusolverDnHandle_t h, int n, float* a, int lda, float* work, int lwork, int* info) {
  check_cusolver(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_UPPER, n, a, lda, work, lwork, info), "cusolverDnSpotrf");
}
void solver_potrf(cusolverDnHandle_t h, int n, double* a, int lda, double* work, int lwork, int* info) {
  check_cusolver(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_UPPER, n, a, lda, work, lwork, info), "cusolverDnDpotrf");
}

}  // namespace

// Synchronizes: a matrix that is not positive definite must fail this task,
// as on the CPU, not a later one that reads the half-factored tile.
void potrf(ExecContext& ctx) {
  const BufferArg& a = ctx.args.buffer(0);
  if (a.rows == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const int info = dispatch_floating(a.dtype, "potrf", [&]<typename T>(std::type_identity<T>) {
    const cusolverDnHandle_t handle = cusolver_handle(ctx);
    const int n = blas_int(a.rows);
    const int lda = leading_dim(a);
    const int lwork = workspace_size(handle, n, a.as<T>(), lda);
    StreamScratch work(ctx, static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(T), "potrf");
    StreamScratch device_info(ctx, sizeof(int), "potrf");
    solver_potrf(handle, n, a.as<T>(), lda, work.as<T>(), lwork, device_info.as<int>());
    int host_info = 0;
    detail::check_cuda(cudaMemcpyAsync(&host_info, device_info.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, stream),
                       "cudaMemcpyAsync");
    detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return host_info;
  });
  if (info > 0) throw Error(fmt::format("potrf: the leading minor of order {} is not positive definite", info));
  if (info < 0) throw Error(fmt::format("potrf: cuSOLVER rejected argument {}", -info));
}

}  // namespace ferry::kernels::cuda
