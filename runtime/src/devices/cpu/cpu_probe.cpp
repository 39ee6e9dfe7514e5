#include "devices/cpu/cpu_probe.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// The best of a few runs: the first pays for page faults and cold caches.
template <typename Fn>
double best_seconds(Fn&& fn, int runs = 3) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

DevicePeak measure() {
  // Tasks run on single-threaded BLAS (CpuDevice): measure one thread's rate.
  openblas_set_num_threads(1);
  const auto began = std::chrono::steady_clock::now();
  DevicePeak peak;
  peak.launch_seconds = 1e-6;
  peak.measured = true;

  constexpr int n = 160;  // 8 MFLOP: large enough for BLAS's blocked path, a few ms
  std::vector<double> a(n * n, 1.0), b(n * n, 0.5), c(n * n, 0.0);
  const double gemm = best_seconds([&] {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
  });
  // Larger than most last-level caches per core: memory, not cache, bandwidth.
  constexpr int len = 1 << 21;  // 16 MiB per vector
  std::vector<double> x(len, 1.0), y(len, 2.0);
  const double axpy = best_seconds([&] { cblas_daxpy(len, 0.5, x.data(), 1, y.data(), 1); });

  if (gemm > 0) peak.flops_per_second = 2.0 * n * n * n / gemm;
  if (axpy > 0) peak.bytes_per_second = 3.0 * sizeof(double) * len / axpy;  // read x and y, write y
  log().debug("cpu probe: {:.2f} GFLOP/s, {:.2f} GB/s per worker (measured in {:.1f} ms)",
              peak.flops_per_second * 1e-9, peak.bytes_per_second * 1e-9,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count());
  return peak;
}

}  // namespace

const DevicePeak& cpu_probe() {
  static const DevicePeak peak = measure();
  return peak;
}

}  // namespace ferry::detail
