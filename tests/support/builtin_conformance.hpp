// The device conformance suite: every built-in kernel on the device under
// test (the CPU device, a remote ferryd, a GPU) must do what its summary
// says, checked against the mathematics (a reference computed here, or the
// defining identity: L * L^T = A, U * S * V^T = A, A v = w v, Q * R = A),
// and must agree with the client's CPU device on the same inputs: bit for
// bit where it runs the same code on the same machine (tolerance 0), within
// a relative tolerance where it computes otherwise (cuBLAS, cuSOLVER and the
// device math library round differently from OpenBLAS and glibc).
// Callers: runtime_test (the CPU), remote_test and remote_membership_test
// (ferryd on its CPUs), ferryd_gpu_test and cuda_device_test (gpu label).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::test {

template <typename T>
void fill_random(const ferry::Buffer<T>& b, unsigned seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  auto h = b.host();
  for (std::size_t i = 0; i < h.rows(); ++i)
    for (std::size_t j = 0; j < h.cols(); ++j) h(i, j) = static_cast<T>(u(rng));
}

template <typename T>
std::vector<T> contents(const ferry::Buffer<T>& b) {
  auto h = b.host_read();
  return {h.begin(), h.end()};
}

// |a - b| <= tolerance * (1 + |a|) element by element; tolerance 0 is bit equality.
inline void expect_close(const std::vector<double>& here, const std::vector<double>& there, double tolerance,
                         const std::string& what) {
  if (tolerance == 0) {
    EXPECT_EQ(here, there) << what;
    return;
  }
  ASSERT_EQ(here.size(), there.size()) << what;
  for (std::size_t i = 0; i < here.size(); ++i)
    ASSERT_NEAR(here[i], there[i], tolerance * (1 + std::abs(here[i]))) << what << " element " << i;
}

// The device under test.
struct ConformanceTarget {
  ferry::OnOption where;  // how its tasks are pinned there
  std::string device;     // the name a task that ran there reports
  double tolerance;       // against the CPU device; 0: bit for bit
};

namespace conformance {

// A row-major matrix on the host, for the references.
struct Matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<double> v;
  double operator()(std::size_t i, std::size_t j) const { return v[i * cols + j]; }
};

template <typename T>
Matrix matrix(const ferry::Buffer<T>& b) {
  auto h = b.host_read();
  Matrix m{h.rows(), h.cols(), {}};
  for (std::size_t i = 0; i < m.rows; ++i)
    for (std::size_t j = 0; j < m.cols; ++j) m.v.push_back(h(i, j));
  return m;
}

// sum_k a(i, k) * b(j, k) when b_transposed, else a(i, k) * b(k, j).
inline double product(const Matrix& a, const Matrix& b, std::size_t i, std::size_t j, bool b_transposed) {
  double s = 0;
  for (std::size_t k = 0; k < a.cols; ++k) s += a(i, k) * (b_transposed ? b(j, k) : b(k, j));
  return s;
}

// The mathematics' tolerance: what rounding leaves of an identity at these sizes.
constexpr double identity_tolerance = 1e-9;

inline void expect_identity(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, identity_tolerance * (1 + std::abs(want))) << what;
}

}  // namespace conformance

// Runs every built-in on the target and on the CPU device, on fresh and
// identical inputs each time, and checks both. Returns the kernels checked.
inline int expect_every_builtin_conforms(ferry::Runtime& rt, const ConformanceTarget& target) {
  using namespace conformance;
  const auto cpu = ferry::on(ferry::cpu());
  const std::size_t n = 64;
  int checked = 0;
  // What a run gives: the buffers it wrote (flattened) and a scalar result.
  using Out = std::pair<std::vector<double>, double>;
  // `run` computes on a device and returns its outputs; `check` judges the
  // target's outputs against the mathematics (run again on fresh inputs).
  const auto kernel = [&](const std::string& name, const std::function<Out(ferry::OnOption)>& run,
                          const std::function<void(const Out&)>& check) {
    SCOPED_TRACE(name + " on " + target.device);
    const Out here = run(cpu);
    const Out there = run(target.where);
    expect_close(here.first, there.first, target.tolerance, name);
    expect_close({here.second}, {there.second}, target.tolerance, name);
    check(there);
    ++checked;
  };
  auto vec = [&](unsigned seed) {
    auto b = rt.buffer<double>(n);
    fill_random(b, seed);
    return b;
  };
  auto spd = [&](std::size_t m) {
    auto a = rt.buffer<double>(m, m);
    fill_random(a, 9);
    auto h = a.host();
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < i; ++j) h(j, i) = h(i, j);
    for (std::size_t i = 0; i < m; ++i) h(i, i) += static_cast<double>(m);
    return a;
  };
  const auto x0 = contents(vec(1)), y0 = contents(vec(2));

  kernel(
      "axpy",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1), y = vec(2);
        auto t = rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.5, where);
        t.wait();
        EXPECT_EQ(t.device(), where.place.kind == ferry::Place::Kind::cpu ? "cpu" : target.device);
        return {contents(y), 0.0};
      },
      [&](const Out& out) {
        for (std::size_t i = 0; i < n; ++i) expect_identity(out.first[i], y0[i] + 2.5 * x0[i], "y + 2.5 x");
      });
  kernel(
      "scal",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1);
        rt.submit("scal", ferry::readwrite(x), -0.5, where);
        return {contents(x), 0.0};
      },
      [&](const Out& out) {
        for (std::size_t i = 0; i < n; ++i) expect_identity(out.first[i], -0.5 * x0[i], "-0.5 x");
      });
  kernel(
      "dot",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1), y = vec(2);
        return {{}, rt.submit("dot", ferry::read(x), ferry::read(y), where).result()};
      },
      [&](const Out& out) {
        double s = 0;
        for (std::size_t i = 0; i < n; ++i) s += x0[i] * y0[i];
        expect_identity(out.second, s, "x . y");
      });
  kernel(
      "nrm2",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1);
        return {{}, rt.submit("nrm2", ferry::read(x), where).result()};
      },
      [&](const Out& out) {
        double s = 0;
        for (double v : x0) s += v * v;
        expect_identity(out.second, std::sqrt(s), "|x|");
      });
  kernel(
      "sum",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1);
        return {{}, rt.submit("sum", ferry::read(x), where).result()};
      },
      [&](const Out& out) {
        double s = 0;
        for (double v : x0) s += v;
        expect_identity(out.second, s, "sum x");
      });
  {
    auto a = rt.buffer<double>(16, 24), b = rt.buffer<double>(24, 8), c = rt.buffer<double>(16, 8);
    fill_random(a, 7);
    fill_random(b, 8);
    fill_random(c, 12);
    const Matrix ma = matrix(a), mb = matrix(b), mc = matrix(c);
    kernel(
        "gemm",
        [&](ferry::OnOption where) -> Out {
          auto a2 = rt.buffer<double>(16, 24), b2 = rt.buffer<double>(24, 8), c2 = rt.buffer<double>(16, 8);
          fill_random(a2, 7);
          fill_random(b2, 8);
          fill_random(c2, 12);
          rt.submit("gemm", ferry::read(a2), ferry::read(b2), ferry::readwrite(c2), 1.5, 0.5, 0, 0, where);
          return {contents(c2), 0.0};
        },
        [&](const Out& out) {
          for (std::size_t i = 0; i < 16; ++i)
            for (std::size_t j = 0; j < 8; ++j)
              expect_identity(out.first[i * 8 + j], 1.5 * product(ma, mb, i, j, false) + 0.5 * mc(i, j),
                              "1.5 a b + 0.5 c");
        });
  }
  {
    // Transposed b, on tiles of larger matrices (strided views on the device).
    auto a = rt.buffer<double>(64, 64), c = rt.buffer<double>(64, 64);
    fill_random(a, 13);
    fill_random(c, 14);
    const Matrix ma = matrix(a), mc = matrix(c);
    kernel(
        "gemm on tiles, b transposed",
        [&](ferry::OnOption where) -> Out {
          auto a2 = rt.buffer<double>(64, 64), c2 = rt.buffer<double>(64, 64);
          fill_random(a2, 13);
          fill_random(c2, 14);
          auto ta = a2.tiles(32, 32);
          auto tc = c2.tiles(32, 32);
          rt.submit("gemm", ferry::read(ta(1, 0)), ferry::read(ta(0, 1)), ferry::readwrite(tc(1, 1)), -1.0, 1.0, 0, 1,
                    where);
          return {contents(c2), 0.0};
        },
        [&](const Out& out) {
          for (std::size_t i = 0; i < 64; ++i)
            for (std::size_t j = 0; j < 64; ++j) {
              double want = mc(i, j);
              if (i >= 32 && j >= 32)
                for (std::size_t k = 0; k < 32; ++k) want -= ma(i, k) * ma(j - 32, 32 + k);
              expect_identity(out.first[i * 64 + j], want, "c11 - a10 a01^T, the rest untouched");
            }
        });
  }
  {
    const Matrix a = matrix(spd(32));
    kernel(
        "potrf",
        [&](ferry::OnOption where) -> Out {
          auto m = spd(32);
          rt.submit("potrf", ferry::readwrite(m), where);
          return {contents(m), 0.0};
        },
        [&](const Out& out) {
          const Matrix l{32, 32, out.first};
          for (std::size_t i = 0; i < 32; ++i)
            for (std::size_t j = 0; j <= i; ++j) {
              double s = 0;
              for (std::size_t k = 0; k <= j; ++k) s += l(i, k) * l(j, k);
              expect_identity(s, a(i, j), "L L^T = a");
            }
        });
  }
  {
    auto l = spd(16);
    rt.submit("potrf", ferry::readwrite(l), cpu).wait();
    auto b = rt.buffer<double>(8, 16);
    fill_random(b, 10);
    const Matrix ml = matrix(l), mb = matrix(b);
    kernel(
        "trsm",
        [&](ferry::OnOption where) -> Out {
          auto b2 = rt.buffer<double>(8, 16);
          fill_random(b2, 10);
          rt.submit("trsm", ferry::read(l), ferry::readwrite(b2), where);
          return {contents(b2), 0.0};
        },
        [&](const Out& out) {
          const Matrix x{8, 16, out.first};
          for (std::size_t i = 0; i < 8; ++i)
            for (std::size_t j = 0; j < 16; ++j) {
              double s = 0;
              for (std::size_t k = 0; k <= j; ++k) s += x(i, k) * ml(j, k);
              expect_identity(s, mb(i, j), "x L^T = b");
            }
        });
  }
  {
    auto a = rt.buffer<double>(16, 8);
    fill_random(a, 11);
    const Matrix ma = matrix(a), mc = matrix(spd(16));
    kernel(
        "syrk",
        [&](ferry::OnOption where) -> Out {
          auto c = spd(16);
          rt.submit("syrk", ferry::read(a), ferry::readwrite(c), where);
          return {contents(c), 0.0};
        },
        [&](const Out& out) {
          for (std::size_t i = 0; i < 16; ++i)
            for (std::size_t j = 0; j <= i; ++j)
              expect_identity(out.first[i * 16 + j], mc(i, j) - product(ma, ma, i, j, true), "c - a a^T (lower)");
        });
  }
  // Decompositions: vectors are unique up to sign (and a GPU uses other
  // algorithms), so the CPU comparison is by magnitude; the identities
  // check the signs.
  auto magnitudes = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    return v;
  };
  {
    auto a = rt.buffer<double>(12, 5);
    fill_random(a, 15);
    const Matrix ma = matrix(a);
    Out exact;  // the target's own factors, for the identity
    kernel(
        "gesdd",
        [&](ferry::OnOption where) -> Out {
          auto s = rt.buffer<double>(5), u = rt.buffer<double>(12, 5), vt = rt.buffer<double>(5, 5);
          rt.submit("gesdd", ferry::read(a), ferry::write(s), ferry::write(u), ferry::write(vt), 0, where);
          std::vector<double> all = contents(s), us = contents(u), vs = contents(vt);
          exact.first = all;
          exact.first.insert(exact.first.end(), us.begin(), us.end());
          exact.first.insert(exact.first.end(), vs.begin(), vs.end());
          for (const auto& part : {magnitudes(us), magnitudes(vs)}) all.insert(all.end(), part.begin(), part.end());
          return {all, 0.0};
        },
        [&](const Out&) {
          const double* s = exact.first.data();
          const Matrix u{12, 5, {exact.first.begin() + 5, exact.first.begin() + 65}};
          const Matrix vt{5, 5, {exact.first.begin() + 65, exact.first.end()}};
          for (std::size_t k = 1; k < 5; ++k) EXPECT_GE(s[k - 1], s[k]) << "s descending";
          for (std::size_t i = 0; i < 12; ++i)
            for (std::size_t j = 0; j < 5; ++j) {
              double sum = 0;
              for (std::size_t k = 0; k < 5; ++k) sum += u(i, k) * s[k] * vt(k, j);
              expect_identity(sum, ma(i, j), "u diag(s) vt = a");
            }
        });
  }
  {
    auto a = spd(10);
    const Matrix ma = matrix(a);
    Out exact;
    kernel(
        "syevd",
        [&](ferry::OnOption where) -> Out {
          auto w = rt.buffer<double>(10), v = rt.buffer<double>(10, 10);
          rt.submit("syevd", ferry::read(a), ferry::write(w), ferry::write(v), where);
          std::vector<double> all = contents(w), vs = contents(v), mags = magnitudes(vs);
          exact.first = all;
          exact.first.insert(exact.first.end(), vs.begin(), vs.end());
          all.insert(all.end(), mags.begin(), mags.end());
          return {all, 0.0};
        },
        [&](const Out&) {
          const double* w = exact.first.data();
          const Matrix v{10, 10, {exact.first.begin() + 10, exact.first.end()}};
          for (std::size_t k = 1; k < 10; ++k) EXPECT_LE(w[k - 1], w[k]) << "w ascending";
          for (std::size_t k = 0; k < 10; ++k)
            for (std::size_t i = 0; i < 10; ++i) {
              double av = 0;
              for (std::size_t j = 0; j < 10; ++j) av += ma(i, j) * v(j, k);
              expect_identity(av, w[k] * v(i, k), "a v = w v, v's columns");
            }
        });
  }
  {
    auto a = rt.buffer<double>(12, 5);
    fill_random(a, 16);
    const Matrix ma = matrix(a);
    Out exact;
    kernel(
        "geqrf",
        [&](ferry::OnOption where) -> Out {
          auto q = rt.buffer<double>(12, 5), r = rt.buffer<double>(5, 5);
          rt.submit("geqrf", ferry::read(a), ferry::write(q), ferry::write(r), 0, where);
          std::vector<double> qs = contents(q), rs = contents(r);
          exact.first = qs;
          exact.first.insert(exact.first.end(), rs.begin(), rs.end());
          std::vector<double> all = magnitudes(qs), factor = magnitudes(rs);
          all.insert(all.end(), factor.begin(), factor.end());
          return {all, 0.0};
        },
        [&](const Out&) {
          const Matrix q{12, 5, {exact.first.begin(), exact.first.begin() + 60}};
          const Matrix r{5, 5, {exact.first.begin() + 60, exact.first.end()}};
          for (std::size_t i = 0; i < 5; ++i)
            for (std::size_t j = 0; j < i; ++j) expect_identity(r(i, j), 0.0, "r upper triangular");
          for (std::size_t i = 0; i < 12; ++i)
            for (std::size_t j = 0; j < 5; ++j) expect_identity(product(q, r, i, j, false), ma(i, j), "q r = a");
        });
  }
  kernel(
      "fill",
      [&](ferry::OnOption where) -> Out {
        auto x = rt.buffer<double>(n);
        rt.submit("fill", ferry::write(x), 3.25, where);
        return {contents(x), 0.0};
      },
      [&](const Out& out) {
        for (double v : out.first) EXPECT_EQ(v, 3.25);
      });
  kernel(
      "copy",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1), y = rt.buffer<double>(n);
        rt.submit("copy", ferry::read(x), ferry::write(y), where);
        return {contents(y), 0.0};
      },
      [&](const Out& out) { EXPECT_EQ(out.first, x0); });
  kernel(
      "map",
      [&](ferry::OnOption where) -> Out {
        auto x = vec(1), y = rt.buffer<double>(n);
        rt.submit("map", ferry::read(x), ferry::write(y), "sigmoid", where);
        return {contents(y), 0.0};
      },
      [&](const Out& out) {
        for (std::size_t i = 0; i < n; ++i) expect_identity(out.first[i], 1 / (1 + std::exp(-x0[i])), "sigmoid x");
      });
  // A kernel failure on the target reaches the waiter like a local one.
  auto bad = spd(8);
  bad.host()(0, 0) = -1.0;
  EXPECT_THROW(rt.submit("potrf", ferry::readwrite(bad), target.where).wait(), ferry::KernelError);
  EXPECT_THROW(rt.wait(), ferry::KernelError);  // wait() reports the failure too, once
  EXPECT_NO_THROW(rt.wait());
  return checked;
}

// The built-ins the suite covers (every one the runtime has but the fused
// programs, which tests/unit/fused_test checks), and how many checks it
// makes of them (gemm twice: whole, and on tiles with b transposed).
inline constexpr const char* conformance_kernels[] = {"axpy", "scal", "dot",   "nrm2",  "sum",  "gemm", "potrf", "trsm",
                                                      "syrk", "gesdd", "syevd", "geqrf", "fill", "copy", "map"};
constexpr int builtins_checked = 16;

}  // namespace ferry::test
