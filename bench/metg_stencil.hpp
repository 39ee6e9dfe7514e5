// The work of one Task Bench stencil point, shared by every system in
// metg_bench.cpp, by the kernel plugin ferryd runs (metg_kernel.cpp) and by
// the serial reference the results are checked against: one definition,
// so that every system does the same arithmetic and gets the same bits.
//
// A point's buffer holds two doubles (Task Bench's 16-byte output):
//   [0] what the compute-bound loop left, so the loop cannot be dropped;
//   [1] a checksum of the three inputs, integer-valued and exact, so that a
//       missed or extra dependency (a neighbour read a step early or late)
//       changes the final row.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace ferry::bench::metg {

constexpr std::size_t values_per_point = 2;
// Independent lanes the loop keeps in flight, in registers: twelve SSE2
// vectors of two doubles fill the FPU's pipes and leave registers over for
// the two constants (64 lanes, Task Bench's count, spill to the stack here,
// where the build targets plain x86-64, and the loop then waits on loads and
// stores instead of arithmetic: half the FLOP/s on this VM).
constexpr std::size_t lanes = 24;
// A multiply and an add per lane per iteration, counted as Task Bench counts
// its compute kernel's fused multiply-adds.
constexpr double flops_per_iteration = 2.0 * lanes;

// `iterations` rounds of a multiply-add on every lane, seeded from `seed`.
// x -> 0.75 x + 0.25 converges to 1 from anywhere, so the values never
// overflow or turn subnormal (which would slow one system's run and not
// another's); the compiler cannot fold the rounds away.
inline double burn(long iterations, double seed) {
  using pair = double __attribute__((vector_size(16)));
  constexpr std::size_t vectors = lanes / 2;
  pair a[vectors];
  for (std::size_t k = 0; k < vectors; ++k) a[k] = pair{seed + 2.0 * k, seed + 2.0 * k + 1};
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (std::size_t k = 0; k < vectors; ++k) a[k] = a[k] * 0.75 + 0.25;
  }
  double sum = 0;
  for (std::size_t k = 0; k < vectors; ++k) sum += a[k][0] + a[k][1];
  return sum;
}

// Exact in doubles: the inputs stay below 2^40, so 15 of them and the
// remainder are integers a double holds.
inline double mix(double left, double mid, double right) {
  constexpr double modulus = 1099511627776.0;  // 2^40
  return std::fmod(3 * left + 5 * mid + 7 * right + 1, modulus);
}

// Point (t, i) from (t-1, i-1), (t-1, i), (t-1, i+1). At an edge the missing
// neighbour is passed as `mid` (Task Bench's edge points have two inputs).
inline void point(long iterations, const double* left, const double* mid, const double* right, double* out) {
  out[0] = burn(iterations, mid[1]);
  out[1] = mix(left[1], mid[1], right[1]);
}

// The value point i starts with, before step 0.
inline double initial(std::size_t i) { return static_cast<double>(i + 1); }

// The last step's row, computed in program order on one thread.
inline std::vector<double> serial(std::size_t width, std::size_t steps, long iterations) {
  std::vector<double> now(width * values_per_point), next(now.size());
  for (std::size_t i = 0; i < width; ++i) now[i * values_per_point] = now[i * values_per_point + 1] = initial(i);
  for (std::size_t t = 0; t < steps; ++t) {
    for (std::size_t i = 0; i < width; ++i) {
      const double* mid = &now[i * values_per_point];
      const double* left = i == 0 ? mid : mid - values_per_point;
      const double* right = i + 1 == width ? mid : mid + values_per_point;
      point(iterations, left, mid, right, &next[i * values_per_point]);
    }
    now.swap(next);
  }
  return now;
}

}  // namespace ferry::bench::metg
