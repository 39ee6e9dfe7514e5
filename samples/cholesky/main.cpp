// Tiled Cholesky on Ferry: builds an SPD matrix, factors it with potrf /
// trsm / syrk / gemm tasks over tiles, checks ||A - L L^T|| / ||A||, and
// prints GFLOP/s and where the tasks ran.
//   cholesky [N=2048] [tile=256]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tiled_cholesky.hpp"

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2048;
  const std::size_t nb = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 256;
  if (n == 0 || nb == 0 || n % nb != 0) {
    std::fprintf(stderr, "usage: cholesky [N] [tile], with N a multiple of tile (got %zu, %zu)\n", n, nb);
    return 2;
  }
  ferry::Runtime rt;
  auto a = rt.buffer<double>(n, n);
  a.set_name("A");
  const std::vector<double> original = ferry::samples::fill_spd(a, 7);

  const auto start = std::chrono::steady_clock::now();
  const std::size_t tasks = ferry::samples::submit_tiled_cholesky(rt, a.tiles(nb, nb));
  rt.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Check with Ferry too: R = L * L^T from the lower triangle, compared to A.
  auto l = rt.buffer<double>(n, n);
  {
    auto factor = a.host();
    auto lower = l.host();
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j <= i; ++j) lower(i, j) = factor(i, j);
  }
  auto r = rt.buffer<double>(n, n);
  rt.submit("gemm", ferry::read(l), ferry::read(l), ferry::readwrite(r), 1.0, 0.0, 0, 1);
  double diff = 0, norm = 0;
  auto rh = r.host();
  for (std::size_t i = 0; i < n * n; ++i) {
    diff += (rh[i] - original[i]) * (rh[i] - original[i]);
    norm += original[i] * original[i];
  }
  const double residual = std::sqrt(diff / norm);
  const double gflops = static_cast<double>(n) * n * n / 3.0 / seconds * 1e-9;

  std::printf("tiled Cholesky N=%zu tile=%zu: %zu tasks in %.3f s, %.1f GFLOP/s, residual %.2e\n", n, nb, tasks,
              seconds, gflops, residual);
  for (const auto& d : rt.devices()) std::printf("  %-8s %zu tasks on %u lanes\n", d.name.c_str(), d.tasks_run, d.lanes);
  if (residual > 1e-12) {
    std::fprintf(stderr, "residual too large: the factorisation is wrong\n");
    return 1;
  }
  return 0;
}
