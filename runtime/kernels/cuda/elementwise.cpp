// fill, copy, map and sum on a GPU: the host side of the own kernels in
// elementwise.cu and reduce.cu, plus copy as a (2-D) device memcpy.
#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "cpu/support.hpp"
#include "cuda/handles.hpp"
#include "cuda/reduction.hpp"
#include "cuda/variants.hpp"
#include "cuda/views.hpp"
#include "ferry/detail/cuda_check.hpp"

namespace ferry::kernels::cuda {

void fill(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const double value = ctx.args.real(1);
  if (x.elements() == 0) return;
  dispatch_numeric(x.dtype, "fill", [&]<typename T>(std::type_identity<T>) {
    detail::check_cuda(launch_fill<T>(view<T>(x, x.contiguous()), static_cast<T>(value), stream_of(ctx)),
                       "fill kernel launch");
  });
}

void copy(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const BufferArg& y = ctx.args.buffer(1);
  if (x.elements() == 0) return;
  const std::size_t element = size_of(x.dtype);
  if (all_contiguous({&x, &y})) {
    detail::check_cuda(cudaMemcpyAsync(y.data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)),
                       "cudaMemcpyAsync");
    return;
  }
  detail::check_cuda(cudaMemcpy2DAsync(y.data, y.ld * element, x.data, x.ld * element, x.cols * element, x.rows,
                                       cudaMemcpyDeviceToDevice, stream_of(ctx)),
                     "cudaMemcpy2DAsync");
}

void map(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  const BufferArg& y = ctx.args.buffer(1);
  // Parsed before anything else, so a bad name fails the same way with or without a device.
  const MapOp op = parse_map_op(ctx.args.text(2));
  const double alpha = ctx.args.real(3);
  if (x.elements() == 0) return;
  const bool one_row = all_contiguous({&x, &y});
  dispatch_floating(x.dtype, "map", [&]<typename T>(std::type_identity<T>) {
    detail::check_cuda(launch_map<T>(op, static_cast<T>(alpha), view<const T>(x, one_row), view<T>(y, one_row),
                                     stream_of(ctx)),
                       "map kernel launch");
  });
}

void sum(ExecContext& ctx) {
  const BufferArg& x = ctx.args.buffer(0);
  if (x.elements() == 0) {
    ctx.result = 0.0;
    return;
  }
  ctx.result = dispatch_numeric(x.dtype, "sum", [&]<typename T>(std::type_identity<T>) {
    const View<const T> xv = view<const T>(x, x.contiguous());
    const ReduceGrid grid = reduce_grid(xv.rows, xv.cols);
    return reduce_on_device(ctx, grid, "sum kernel launch",
                            [&](double* partials) { return launch_sum<T>(xv, grid, partials, stream_of(ctx)); });
  });
}

}  // namespace ferry::kernels::cuda
