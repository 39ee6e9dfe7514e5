// The host half of an own reduction: scratch for the per-block partials, the
// launch, the read-back and the final sum. Synchronizes the stream, as every
// kernel with a scalar result must.
#pragma once

#include <vector>

#include "cuda/launch.hpp"
#include "cuda/scratch.hpp"
#include "ferry/detail/cuda_check.hpp"

namespace ferry::kernels::cuda {

// launch(double* partials) enqueues the kernel on ctx's stream and returns
// its launch status. The partials are scratch from ctx's DevicePool.
template <typename Launch>
double reduce_on_device(const ExecContext& ctx, ReduceGrid grid, const char* kernel, Launch launch) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const std::size_t bytes = grid.blocks() * sizeof(double);
  StreamScratch partials(ctx, bytes, kernel);
  detail::check_cuda(launch(partials.as<double>()), kernel);
  std::vector<double> host(grid.blocks());
  detail::check_cuda(cudaMemcpyAsync(host.data(), partials.as<double>(), bytes, cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync");
  detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  double total = 0;
  for (const double partial : host) total += partial;
  return total;
}

}  // namespace ferry::kernels::cuda
