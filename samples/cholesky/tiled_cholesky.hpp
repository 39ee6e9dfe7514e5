// Right-looking tiled Cholesky (A = L * L^T, lower, row-major) as Ferry
// tasks over tiles() views: the dependencies between the potrf, trsm, syrk
// and gemm tasks come from their accesses alone. Shared by the sample and
// bench/cholesky_bench.cpp.
#pragma once

#include <ferry/ferry.hpp>

#include <random>
#include <vector>

namespace ferry::samples {

// Random symmetric plus n on the diagonal: symmetric positive definite.
// Returns a copy of the matrix to check the factor against.
inline std::vector<double> fill_spd(const Buffer<double>& a, unsigned seed) {
  const std::size_t n = a.rows();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto h = a.host();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) h(i, j) = h(j, i) = u(rng) + (i == j ? static_cast<double>(n) : 0.0);
  return std::vector<double>(h.begin(), h.end());
}

// `where`: placement options given to every task (none: the scheduler's choice).
template <typename T, typename... Where>
std::size_t submit_tiled_cholesky(Runtime& rt, const TileGrid<T>& a, const Where&... where) {
  const std::size_t nt = a.rows();
  std::size_t tasks = 0;
  for (std::size_t k = 0; k < nt; ++k) {
    rt.submit("potrf", readwrite(a(k, k)), where...);
    ++tasks;
    for (std::size_t i = k + 1; i < nt; ++i, ++tasks) rt.submit("trsm", read(a(k, k)), readwrite(a(i, k)), where...);
    for (std::size_t i = k + 1; i < nt; ++i) {
      rt.submit("syrk", read(a(i, k)), readwrite(a(i, i)), where...);
      ++tasks;
      for (std::size_t j = k + 1; j < i; ++j, ++tasks)
        rt.submit("gemm", read(a(i, k)), read(a(j, k)), readwrite(a(i, j)), -1.0, 1.0, 0, 1, where...);
    }
  }
  return tasks;
}

}  // namespace ferry::samples
