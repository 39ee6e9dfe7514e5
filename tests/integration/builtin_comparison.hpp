// Every built-in kernel run twice on identical inputs, once on the client's
// CPU and once on a ferryd, with the results compared: exactly when the
// server computes on its CPUs (the same code on the same machine), within a
// relative tolerance when it computes on a GPU (cuBLAS, cuSOLVER and the
// device math library round differently from OpenBLAS and glibc).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::test {

template <typename T>
void fill_random(ferry::Buffer<T>& b, unsigned seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  auto h = b.host();
  for (std::size_t i = 0; i < h.rows(); ++i)
    for (std::size_t j = 0; j < h.cols(); ++j) h(i, j) = static_cast<T>(u(rng));
}

template <typename T>
std::vector<T> contents(const ferry::Buffer<T>& b) {
  auto h = b.host();
  return {h.begin(), h.end()};
}

// |a - b| <= tolerance * (1 + |a|) element by element; tolerance 0 is bit equality.
inline void expect_close(const std::vector<double>& here, const std::vector<double>& there, double tolerance,
                         const char* kernel) {
  if (tolerance == 0) {
    EXPECT_EQ(here, there) << kernel;
    return;
  }
  ASSERT_EQ(here.size(), there.size()) << kernel;
  for (std::size_t i = 0; i < here.size(); ++i)
    ASSERT_NEAR(here[i], there[i], tolerance * (1 + std::abs(here[i]))) << kernel << " element " << i;
}

inline void expect_every_builtin_matches_the_cpu(ferry::Runtime& rt, const std::string& server, double tolerance) {
  const auto remote = ferry::on(ferry::remote(server));
  const std::size_t n = 64;
  using Out = std::pair<std::vector<double>, double>;
  auto run_both = [&](const char* kernel, auto&& submit) {
    const Out here = submit(ferry::on(ferry::cpu()));
    const Out there = submit(remote);
    expect_close(here.first, there.first, tolerance, kernel);
    expect_close({here.second}, {there.second}, tolerance, kernel);
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
  run_both("axpy", [&](ferry::OnOption where) -> Out {
    auto x = vec(1), y = vec(2);
    auto t = rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.5, where);
    t.wait();
    EXPECT_EQ(t.device(), where.place.kind == ferry::Place::Kind::cpu ? "cpu" : "remote:" + server);
    return {contents(y), 0.0};
  });
  run_both("scal", [&](ferry::OnOption where) -> Out {
    auto x = vec(3);
    rt.submit("scal", ferry::readwrite(x), -0.5, where);
    return {contents(x), 0.0};
  });
  run_both("dot", [&](ferry::OnOption where) -> Out {
    auto x = vec(4), y = vec(5);
    return {{}, rt.submit("dot", ferry::read(x), ferry::read(y), where).result()};
  });
  run_both("nrm2", [&](ferry::OnOption where) -> Out {
    auto x = vec(6);
    return {{}, rt.submit("nrm2", ferry::read(x), where).result()};
  });
  run_both("gemm", [&](ferry::OnOption where) -> Out {
    auto a = rt.buffer<double>(16, 24), b = rt.buffer<double>(24, 8), c = rt.buffer<double>(16, 8);
    fill_random(a, 7);
    fill_random(b, 8);
    rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), 1.5, 0.0, 0, 0, where);
    return {contents(c), 0.0};
  });
  run_both("potrf", [&](ferry::OnOption where) -> Out {
    auto a = spd(32);
    rt.submit("potrf", ferry::readwrite(a), where);
    return {contents(a), 0.0};
  });
  run_both("trsm", [&](ferry::OnOption where) -> Out {
    auto l = spd(16), b = rt.buffer<double>(8, 16);
    fill_random(b, 10);
    rt.submit("potrf", ferry::readwrite(l), ferry::on(ferry::cpu()));
    rt.submit("trsm", ferry::read(l), ferry::readwrite(b), where);
    return {contents(b), 0.0};
  });
  run_both("syrk", [&](ferry::OnOption where) -> Out {
    auto a = rt.buffer<double>(16, 8), c = spd(16);
    fill_random(a, 11);
    rt.submit("syrk", ferry::read(a), ferry::readwrite(c), where);
    return {contents(c), 0.0};
  });
  // Decompositions: vectors are unique up to sign (and a GPU uses other
  // algorithms), so they compare by magnitude.
  auto magnitudes = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    return v;
  };
  run_both("gesdd", [&](ferry::OnOption where) -> Out {
    auto a = rt.buffer<double>(12, 5), s = rt.buffer<double>(5), u = rt.buffer<double>(12, 5),
         vt = rt.buffer<double>(5, 5);
    fill_random(a, 15);
    rt.submit("gesdd", ferry::read(a), ferry::write(s), ferry::write(u), ferry::write(vt), 0, where);
    std::vector<double> all = contents(s);
    for (const auto& part : {magnitudes(contents(u)), magnitudes(contents(vt))})
      all.insert(all.end(), part.begin(), part.end());
    return {all, 0.0};
  });
  run_both("syevd", [&](ferry::OnOption where) -> Out {
    auto a = spd(10), w = rt.buffer<double>(10), v = rt.buffer<double>(10, 10);
    rt.submit("syevd", ferry::read(a), ferry::write(w), ferry::write(v), where);
    std::vector<double> all = contents(w), vectors = magnitudes(contents(v));
    all.insert(all.end(), vectors.begin(), vectors.end());
    return {all, 0.0};
  });
  run_both("geqrf", [&](ferry::OnOption where) -> Out {
    auto a = rt.buffer<double>(12, 5), q = rt.buffer<double>(12, 5), r = rt.buffer<double>(5, 5);
    fill_random(a, 16);
    rt.submit("geqrf", ferry::read(a), ferry::write(q), ferry::write(r), 0, where);
    std::vector<double> all = magnitudes(contents(q)), factor = magnitudes(contents(r));
    all.insert(all.end(), factor.begin(), factor.end());
    return {all, 0.0};
  });
  run_both("fill", [&](ferry::OnOption where) -> Out {
    auto x = rt.buffer<double>(n);
    rt.submit("fill", ferry::write(x), 3.25, where);
    return {contents(x), 0.0};
  });
  run_both("copy", [&](ferry::OnOption where) -> Out {
    auto x = vec(12), y = rt.buffer<double>(n);
    rt.submit("copy", ferry::read(x), ferry::write(y), where);
    return {contents(y), 0.0};
  });
  run_both("map", [&](ferry::OnOption where) -> Out {
    auto x = vec(13), y = rt.buffer<double>(n);
    rt.submit("map", ferry::read(x), ferry::write(y), "sigmoid", where);
    return {contents(y), 0.0};
  });
  run_both("sum", [&](ferry::OnOption where) -> Out {
    auto x = vec(14);
    return {{}, rt.submit("sum", ferry::read(x), where).result()};
  });
  // A kernel failure on the remote reaches the waiter like a local one.
  auto bad = spd(8);
  bad.host()(0, 0) = -1.0;
  EXPECT_THROW(rt.submit("potrf", ferry::readwrite(bad), remote).wait(), ferry::KernelError);
  EXPECT_THROW(rt.wait(), ferry::KernelError);  // wait() reports the failure too, once
  EXPECT_NO_THROW(rt.wait());
}

}  // namespace ferry::test
