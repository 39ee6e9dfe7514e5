// BLAS level 1 on a GPU: axpy, scal, dot, nrm2. Contiguous calls go to
// cuBLAS as one vector; strided views (tiles, ld > cols), which BLAS-1
// cannot describe, take the own 2-D kernels or are packed first.
#include <cublas_v2.h>

#include "cpu/support.hpp"
#include "cuda/handles.hpp"
#include "cuda/reduction.hpp"
#include "cuda/scratch.hpp"
#include "cuda/variants.hpp"
#include "cuda/views.hpp"
#include "ferry/detail/cuda_check.hpp"

namespace ferry::kernels::cuda {
namespace {

// float and double entry points under one name, so kernels are written once.
// The handle's pointer mode is host: scalars pass from, and results land in,
// host memory (a result waits for the stream, which a scalar kernel must).
void blas_axpy(cublasHandle_t h, int n, float alpha, const float* x, float* y) {
  check_cublas(cublasSaxpy(h, n, &alpha, x, 1, y, 1), "cublasSaxpy");
}
void blas_axpy(cublasHandle_t h, int n, double alpha, const double* x, double* y) {
  check_cublas(cublasDaxpy(h, n, &alpha, x, 1, y, 1), "cublasDaxpy");
}
void blas_scal(cublasHandle_t h, int n, float alpha, float* x) {
  check_cublas(cublasSscal(h, n, &alpha, x, 1), "cublasSscal");
}
void blas_scal(cublasHandle_t h, int n, double alpha, double* x) {
  check_cublas(cublasDscal(h, n, &alpha, x, 1), "cublasDscal");
}
double blas_nrm2(cublasHandle_t h, int n, const float* x) {
  float result = 0;
  check_cublas(cublasSnrm2(h, n, x, 1, &result), "cublasSnrm2");
  return result;
}
double blas_nrm2(cublasHandle_t h, int n, const double* x) {
  double result = 0;
  check_cublas(cublasDnrm2(h, n, x, 1, &result), "cublasDnrm2");
  return result;
}

}  // namespace

void axpy(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const BufferArg& y = ctx.args.buffer(1);
  const double alpha = ctx.args.real(2);
  if (y.elements() == 0) return;
  dispatch_floating(x.dtype, "axpy", [&]<typename T>(std::type_identity<T>) {
    if (all_contiguous({&x, &y})) {
      blas_axpy(cublas_handle(ctx), blas_int(y.elements()), static_cast<T>(alpha), x.as<T>(), y.as<T>());
    } else {
      detail::check_cuda(launch_axpy<T>(static_cast<T>(alpha), view<const T>(x, false), view<T>(y, false), stream_of(ctx)),
                         "axpy kernel launch");
    }
  });
}

void scal(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const double alpha = ctx.args.real(1);
  if (x.elements() == 0) return;
  dispatch_floating(x.dtype, "scal", [&]<typename T>(std::type_identity<T>) {
    if (x.contiguous()) {
      blas_scal(cublas_handle(ctx), blas_int(x.elements()), static_cast<T>(alpha), x.as<T>());
    } else {
      // In place: map's scale is x = alpha * x.
      detail::check_cuda(launch_map<T>(MapOp::scale, static_cast<T>(alpha), view<const T>(x, false), view<T>(x, false),
                                       stream_of(ctx)),
                         "scal kernel launch");
    }
  });
}

// cublasDdot for contiguous doubles; otherwise the own kernel, because
// cublasDotEx has no float-in, double-accumulate mode and the CPU's
// cblas_dsdot accumulates float products in double.
void dot(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const BufferArg& y = ctx.args.buffer(1);
  if (x.elements() == 0) {
    ctx.result = 0.0;
    return;
  }
  const bool one_row = all_contiguous({&x, &y});
  if (x.dtype == DType::f64 && one_row) {
    double result = 0;
    check_cublas(cublasDdot(cublas_handle(ctx), blas_int(x.elements()), x.as<double>(), 1, y.as<double>(), 1, &result),
                 "cublasDdot");
    ctx.result = result;
    return;
  }
  ctx.result = dispatch_floating(x.dtype, "dot", [&]<typename T>(std::type_identity<T>) {
    const View<const T> xv = view<const T>(x, one_row);
    const View<const T> yv = view<const T>(y, one_row);
    const ReduceGrid grid = reduce_grid(xv.rows, xv.cols);
    return reduce_on_device(ctx, grid, "dot kernel launch", [&](double* partials) {
      return launch_dot<T>(xv, yv, grid, partials, stream_of(ctx));
    });
  });
}

// A strided view is packed into stream-ordered scratch first, so cuBLAS's
// overflow-safe norm sees one vector (the CPU combines row norms with hypot;
// both avoid overflow, they differ only in rounding).
void nrm2(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  if (x.elements() == 0) {
    ctx.result = 0.0;
    return;
  }
  ctx.result = dispatch_floating(x.dtype, "nrm2", [&]<typename T>(std::type_identity<T>) {
    const int n = blas_int(x.elements());
    if (x.contiguous()) return blas_nrm2(cublas_handle(ctx), n, x.as<T>());
    const cudaStream_t stream = stream_of(ctx);
    StreamScratch packed(ctx, x.bytes(), "nrm2");
    detail::check_cuda(cudaMemcpy2DAsync(packed.as<T>(), x.cols * sizeof(T), x.as<T>(), x.ld * sizeof(T),
                                         x.cols * sizeof(T), x.rows, cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpy2DAsync");
    return blas_nrm2(cublas_handle(ctx), n, packed.as<T>());
  });
}

}  // namespace ferry::kernels::cuda
