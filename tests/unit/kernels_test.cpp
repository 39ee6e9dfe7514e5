// The built-in CPU kernels against naive loops, the registry, and the
// argument checks users see at submission.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"
#include "runtime_test_support.hpp"

namespace {

using ferry::AccessMode;
using ferry::Arg;
using ferry::BufferArg;
using ferry::KernelArgs;
using ferry::ScalarValue;

// A row-major matrix in a vector; ld > cols leaves a margin that views must not touch.
template <typename T>
struct Mat {
  std::size_t rows, cols, ld;
  std::vector<T> v;
  Mat(std::size_t r, std::size_t c, std::size_t stride = 0) : rows(r), cols(c), ld(stride ? stride : c), v(r * ld) {}
  T& operator()(std::size_t i, std::size_t j) { return v[i * ld + j]; }
  BufferArg arg(AccessMode mode) { return tile(0, 0, rows, cols, mode); }
  BufferArg tile(std::size_t r0, std::size_t c0, std::size_t r, std::size_t c, AccessMode mode) {
    return BufferArg{&v[r0 * ld + c0], ferry::dtype_of<T>(), r, c, ld, mode};
  }
  void randomize(unsigned seed, double lo = -1, double hi = 1) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (T& x : v) x = static_cast<T>(dist(gen));
  }
};

Arg buf(const BufferArg& b) { return Arg{b}; }
// Assigned, not brace-built: GCC 12 under sanitizers warns about variant temporaries.
template <typename V>
Arg val(V v) {
  Arg a;
  a.emplace<ScalarValue>(std::move(v));
  return a;
}
Arg num(double d) { return val(d); }
Arg whole(std::int64_t i) { return val(i); }
Arg text(std::string s) { return val(std::move(s)); }

const ferry::KernelDef& kernel(const std::string& name) { return ferry::testing::builtin_kernel(name); }

// Checks like a submission would, then runs the CPU implementation.
std::optional<double> run(const std::string& name, std::vector<Arg> items) {
  KernelArgs args{std::move(items)};
  ferry::check_arguments(kernel(name), args, "t");
  const std::string task = "t";
  ferry::ExecContext ctx{.args = args, .task_name = task, .worker = 0, .stream = nullptr, .device = -1, .result = std::nullopt};
  kernel(name).cpu(ctx);
  return ctx.result;
}

// The UsageError message check_arguments gives, or "" when it accepts.
std::string rejection(const std::string& name, std::vector<Arg> items) {
  KernelArgs args{std::move(items)};
  try {
    ferry::check_arguments(kernel(name), args, "T");
  } catch (const ferry::UsageError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

template <typename T>
double tol() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-10;
}

template <typename T>
void expect_near(double got, double want) {
  EXPECT_LE(std::abs(got - want), tol<T>() * std::max(1.0, std::abs(want))) << got << " vs " << want;
}

template <typename T>
class Typed : public ::testing::Test {};
using Floats = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Typed, Floats);

TYPED_TEST(Typed, Blas1OnVectorsAndTiles) {
  using T = TypeParam;
  Mat<T> x(1, 37), y(1, 37);
  x.randomize(1);
  y.randomize(2);
  const Mat<T> y0 = y;
  run("axpy", {buf(x.arg(AccessMode::read)), buf(y.arg(AccessMode::readwrite)), num(2.5)});
  for (std::size_t i = 0; i < 37; ++i) expect_near<T>(y(0, i), y0.v[i] + 2.5 * x(0, i));
  run("axpy", {buf(x.arg(AccessMode::read)), buf(y.arg(AccessMode::readwrite))});  // alpha defaults to 1
  for (std::size_t i = 0; i < 37; ++i) expect_near<T>(y(0, i), y0.v[i] + 3.5 * x(0, i));

  // 3 x 4 tiles inside 6 x 9 matrices: the margin must stay as it was.
  Mat<T> big_x(6, 9), big_y(6, 9);
  big_x.randomize(3);
  big_y.randomize(4);
  const Mat<T> before = big_y;
  run("axpy", {buf(big_x.tile(1, 2, 3, 4, AccessMode::read)), buf(big_y.tile(2, 5, 3, 4, AccessMode::readwrite)),
               num(-1.5)});
  for (std::size_t i = 0; i < 6; ++i) {
    for (std::size_t j = 0; j < 9; ++j) {
      const bool inside = i >= 2 && i < 5 && j >= 5;
      const double want = before.v[i * 9 + j] + (inside ? -1.5 * big_x(i - 1, j - 3) : 0.0);
      expect_near<T>(big_y(i, j), want);
    }
  }

  double dot = 0, sq = 0, tile_dot = 0, tile_sq = 0;
  for (std::size_t i = 0; i < 37; ++i) dot += double(x(0, i)) * double(y(0, i)), sq += double(x(0, i)) * x(0, i);
  for (std::size_t i = 1; i < 4; ++i) {
    for (std::size_t j = 2; j < 6; ++j) tile_dot += double(big_x(i, j)) * big_y(i, j), tile_sq += double(big_x(i, j)) * big_x(i, j);
  }
  expect_near<T>(*run("dot", {buf(x.arg(AccessMode::read)), buf(y.arg(AccessMode::read))}), dot);
  expect_near<T>(*run("dot", {buf(big_x.tile(1, 2, 3, 4, AccessMode::read)), buf(big_y.tile(1, 2, 3, 4, AccessMode::read))}),
                 tile_dot);
  expect_near<T>(*run("nrm2", {buf(x.arg(AccessMode::read))}), std::sqrt(sq));
  expect_near<T>(*run("nrm2", {buf(big_x.tile(1, 2, 3, 4, AccessMode::read))}), std::sqrt(tile_sq));

  const Mat<T> x0 = x;
  run("scal", {buf(x.arg(AccessMode::readwrite)), num(-3)});
  for (std::size_t i = 0; i < 37; ++i) expect_near<T>(x(0, i), -3.0 * x0.v[i]);
}

template <typename T>
void reference_gemm(Mat<T>& a, Mat<T>& b, Mat<T>& c, double alpha, double beta, bool ta, bool tb) {
  const std::size_t k = ta ? a.rows : a.cols;
  for (std::size_t i = 0; i < c.rows; ++i) {
    for (std::size_t j = 0; j < c.cols; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) s += double(ta ? a(p, i) : a(i, p)) * double(tb ? b(j, p) : b(p, j));
      c(i, j) = static_cast<T>(alpha * s + beta * c(i, j));
    }
  }
}

TYPED_TEST(Typed, GemmAllTransposes) {
  using T = TypeParam;
  const std::size_t m = 7, n = 5, k = 11;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Mat<T> a(ta ? k : m, ta ? m : k), b(tb ? n : k, tb ? k : n), c(m, n);
      a.randomize(10);
      b.randomize(11);
      c.randomize(12);
      Mat<T> want = c;
      reference_gemm(a, b, want, 0.5, -2.0, ta, tb);
      run("gemm", {buf(a.arg(AccessMode::read)), buf(b.arg(AccessMode::read)), buf(c.arg(AccessMode::readwrite)),
                   num(0.5), num(-2.0), whole(ta), whole(tb)});
      for (std::size_t i = 0; i < c.v.size(); ++i) expect_near<T>(c.v[i], want.v[i]);
    }
  }
}

TYPED_TEST(Typed, GemmOnTilesOfBiggerMatrices) {
  using T = TypeParam;
  Mat<T> big(12, 10);
  big.randomize(20);
  const Mat<T> before = big;
  // c = a * b with a = big[0:4, 0:3], b = big[4:7, 0:5], c = big[8:12, 5:10].
  Mat<T> a(4, 3), b(3, 5), want(4, 5);
  for (std::size_t i = 0; i < 4; ++i) for (std::size_t j = 0; j < 3; ++j) a(i, j) = big(i, j);
  for (std::size_t i = 0; i < 3; ++i) for (std::size_t j = 0; j < 5; ++j) b(i, j) = big(4 + i, j);
  reference_gemm(a, b, want, 1.0, 0.0, false, false);
  run("gemm", {buf(big.tile(0, 0, 4, 3, AccessMode::read)), buf(big.tile(4, 0, 3, 5, AccessMode::read)),
               buf(big.tile(8, 5, 4, 5, AccessMode::readwrite))});
  for (std::size_t i = 0; i < 12; ++i) {
    for (std::size_t j = 0; j < 10; ++j) {
      const bool inside = i >= 8 && j >= 5;
      expect_near<T>(big(i, j), inside ? double(want(i - 8, j - 5)) : double(before.v[i * 10 + j]));
    }
  }
}

// Right-looking tiled Cholesky over nt x nt tiles of one row-major matrix.
template <typename T>
void tiled_cholesky(Mat<T>& a, std::size_t nt, std::size_t nb) {
  const auto t = [&](std::size_t i, std::size_t j, AccessMode m) { return buf(a.tile(i * nb, j * nb, nb, nb, m)); };
  for (std::size_t k = 0; k < nt; ++k) {
    run("potrf", {t(k, k, AccessMode::readwrite)});
    for (std::size_t i = k + 1; i < nt; ++i) run("trsm", {t(k, k, AccessMode::read), t(i, k, AccessMode::readwrite)});
    for (std::size_t i = k + 1; i < nt; ++i) {
      run("syrk", {t(i, k, AccessMode::read), t(i, i, AccessMode::readwrite)});
      for (std::size_t j = k + 1; j < i; ++j) {
        run("gemm", {t(i, k, AccessMode::read), t(j, k, AccessMode::read), t(i, j, AccessMode::readwrite), num(-1),
                     num(1), whole(0), whole(1)});
      }
    }
  }
}

TYPED_TEST(Typed, TiledCholeskyMatchesTheFullFactor) {
  using T = TypeParam;
  for (std::size_t nt : {2, 3}) {
    const std::size_t nb = 6, n = nt * nb;
    Mat<T> m(n, n), spd(n, n);
    m.randomize(30 + nt);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double s = i == j ? double(n) : 0.0;
        for (std::size_t p = 0; p < n; ++p) s += double(m(i, p)) * m(j, p);
        spd(i, j) = static_cast<T>(s);
      }
    }
    Mat<T> full = spd, tiled = spd;
    run("potrf", {buf(full.arg(AccessMode::readwrite))});
    tiled_cholesky(tiled, nt, nb);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j <= i; ++j) {
        expect_near<T>(tiled(i, j), full(i, j));
        double s = 0;  // (L L^T)(i, j) reproduces A
        for (std::size_t p = 0; p <= j; ++p) s += double(full(i, p)) * full(j, p);
        expect_near<T>(s, spd(i, j));
      }
    }
  }
}

TYPED_TEST(Typed, PotrfRejectsAMatrixThatIsNotPositiveDefinite) {
  using T = TypeParam;
  Mat<T> a(3, 3);
  a(0, 0) = 4, a(1, 1) = -1, a(2, 2) = 1;
  try {
    run("potrf", {buf(a.arg(AccessMode::readwrite))});
    ADD_FAILURE() << "potrf accepted an indefinite matrix";
  } catch (const ferry::Error& e) {
    EXPECT_CONTAINS(e.what(), "leading minor of order 2 is not positive definite");
  }
}

// Views with margins (ld > cols) in and out: the margins stay untouched,
// and a, which LAPACK would overwrite, is only read.
TYPED_TEST(Typed, GesddReconstructsOnTilesOfBiggerMatrices) {
  using T = TypeParam;
  const std::pair<std::size_t, std::size_t> shapes[] = {{7, 4}, {4, 7}};
  for (const auto& [m, n] : shapes) {
    SCOPED_TRACE(::testing::Message() << m << " x " << n);
    const std::size_t k = std::min(m, n);
    Mat<T> a(m, n, n + 3), s(1, k), u(m, k, k + 2), vt(k, n, n + 1);
    a.randomize(40 + m);
    u.randomize(1), vt.randomize(2);
    const Mat<T> a0 = a, u0 = u, vt0 = vt;
    run("gesdd", {buf(a.arg(AccessMode::read)), buf(s.arg(AccessMode::write)), buf(u.arg(AccessMode::write)),
                  buf(vt.arg(AccessMode::write))});
    EXPECT_EQ(a.v, a0.v);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double r = 0;
        for (std::size_t p = 0; p < k; ++p) r += double(u(i, p)) * s(0, p) * vt(p, j);
        expect_near<T>(r, a(i, j));
      }
      for (std::size_t j = k; j < u.ld; ++j) EXPECT_EQ(u.v[i * u.ld + j], u0.v[i * u.ld + j]);
    }
    for (std::size_t p = 0; p + 1 < k; ++p) EXPECT_GE(s(0, p), s(0, p + 1));
    for (std::size_t p = 0; p < k; ++p) {
      for (std::size_t j = n; j < vt.ld; ++j) EXPECT_EQ(vt.v[p * vt.ld + j], vt0.v[p * vt.ld + j]);
    }
  }
}

TYPED_TEST(Typed, GeqrfGivesOrthonormalQAndUpperTriangularR) {
  using T = TypeParam;
  for (const std::int64_t complete : {0, 1}) {
    const std::size_t m = 7, n = 4, qc = complete ? m : n, rr = complete ? m : n;
    Mat<T> a(m, n, n + 2), q(m, qc, qc + 1), r(rr, n, n + 3);
    a.randomize(60);
    r.randomize(3);  // garbage below the diagonal must go
    run("geqrf", {buf(a.arg(AccessMode::read)), buf(q.arg(AccessMode::write)), buf(r.arg(AccessMode::write)),
                  whole(complete)});
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::size_t p = 0; p < rr; ++p) s += double(q(i, p)) * r(p, j);
        expect_near<T>(s, a(i, j));
      }
    }
    for (std::size_t i = 0; i < rr; ++i) {
      for (std::size_t j = 0; j < std::min(i, n); ++j) EXPECT_EQ(r(i, j), T{0});
    }
    for (std::size_t c = 0; c < qc; ++c) {
      for (std::size_t d = 0; d < qc; ++d) {
        double s = 0;
        for (std::size_t i = 0; i < m; ++i) s += double(q(i, c)) * q(i, d);
        expect_near<T>(s, c == d ? 1.0 : 0.0);
      }
    }
  }
}

TYPED_TEST(Typed, SyevdGivesEigenpairsFromTheLowerTriangle) {
  using T = TypeParam;
  const std::size_t n = 6;
  Mat<T> a(n, n, n + 2), w(1, n), v(n, n, n + 1);
  a.randomize(50);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < i; ++j) a(j, i) = 99;  // above the diagonal: ignored
  }
  run("syevd", {buf(a.arg(AccessMode::read)), buf(w.arg(AccessMode::write)), buf(v.arg(AccessMode::write))});
  for (std::size_t c = 0; c < n; ++c) {  // A v_c = w_c v_c with A symmetric from the lower triangle
    if (c + 1 < n) {
      EXPECT_LE(w(0, c), w(0, c + 1));
    }
    for (std::size_t i = 0; i < n; ++i) {
      double r = 0;
      for (std::size_t p = 0; p < n; ++p) r += double(i >= p ? a(i, p) : a(p, i)) * v(p, c);
      expect_near<T>(r, double(w(0, c)) * v(i, c));
    }
  }
  EXPECT_CONTAINS(rejection("syevd", {buf(a.tile(0, 0, n, n - 1, AccessMode::read)), buf(w.arg(AccessMode::write)),
                                      buf(v.arg(AccessMode::write))}),
                  "a is 6 x 5; it must be square");
}

TYPED_TEST(Typed, MapEveryOpAndOnTiles) {
  using T = TypeParam;
  const std::vector<std::pair<std::string, std::function<double(double)>>> ops{
      {"copy", [](double v) { return v; }},      {"neg", [](double v) { return -v; }},
      {"abs", [](double v) { return std::abs(v); }}, {"sqrt", [](double v) { return std::sqrt(std::abs(v)); }},
      {"exp", [](double v) { return std::exp(v); }}, {"log", [](double v) { return std::log(std::abs(v)); }},
      {"square", [](double v) { return v * v; }},    {"relu", [](double v) { return v > 0 ? v : 0; }},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }}, {"scale", [](double v) { return 3 * v; }}};
  for (const auto& [op, f] : ops) {
    const bool positive = op == "sqrt" || op == "log";
    Mat<T> x(5, 8), y(5, 8);
    x.randomize(40, positive ? 0.1 : -2, 2);
    run("map", {buf(x.arg(AccessMode::read)), buf(y.arg(AccessMode::write)), text(op), num(3)});
    for (std::size_t i = 0; i < x.v.size(); ++i) expect_near<T>(y.v[i], f(x.v[i]));
  }
  Mat<T> x(4, 6), y(4, 6);
  x.randomize(41);
  run("map", {buf(x.tile(1, 1, 2, 3, AccessMode::read)), buf(y.tile(2, 3, 2, 3, AccessMode::write)), text("neg")});
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 6; ++j) {
      const bool inside = i >= 2 && j >= 3;
      expect_near<T>(y(i, j), inside ? -double(x(i - 1, j - 2)) : 0.0);
    }
  }
}

template <typename T>
class Numeric : public ::testing::Test {};
using Numerics = ::testing::Types<float, double, std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(Numeric, Numerics);

TYPED_TEST(Numeric, FillCopySum) {
  using T = TypeParam;
  Mat<T> x(3, 5, 7), y(3, 5);
  run("fill", {buf(x.arg(AccessMode::write)), num(4)});
  EXPECT_EQ(x(2, 4), T(4));
  EXPECT_EQ(x(2, 5), T(0));  // the margin past cols
  x(1, 2) = T(-6);
  run("copy", {buf(x.arg(AccessMode::read)), buf(y.arg(AccessMode::write))});
  EXPECT_EQ(y(1, 2), T(-6));
  EXPECT_EQ(y(2, 4), T(4));
  EXPECT_DOUBLE_EQ(*run("sum", {buf(x.arg(AccessMode::read))}), 14 * 4 - 6);
  EXPECT_DOUBLE_EQ(*run("sum", {buf(y.arg(AccessMode::read))}), 14 * 4 - 6);
}

TEST(KernelArgsCheck, ReportsWhatTheUserGotWrong) {
  Mat<float> x(1, 4), y(1, 4), z(1, 5), sq(3, 3), rect(3, 4), a(3, 4), b(5, 2), c(3, 2);
  Mat<double> xd(1, 4);
  Mat<std::int32_t> xi(1, 4);
  const auto r = [](Mat<float>& m) { return buf(m.arg(AccessMode::read)); };
  const auto rw = [](Mat<float>& m) { return buf(m.arg(AccessMode::readwrite)); };

  EXPECT_CONTAINS(rejection("axpy", {r(x), rw(y), num(1), num(2)}), "takes 3 arguments, axpy(x, y, alpha = 1), but got 4");
  EXPECT_CONTAINS(rejection("axpy", {r(x)}), "argument 2 'y' is missing");
  EXPECT_CONTAINS(rejection("scal", {rw(x)}), "argument 2 'alpha' is missing");
  EXPECT_CONTAINS(rejection("axpy", {num(1), rw(y)}), "argument 1 'x' must be a buffer, got the real number 1");
  EXPECT_CONTAINS(rejection("axpy", {r(x), rw(y), r(z)}), "argument 3 'alpha' must be a real number, got a buffer");
  EXPECT_CONTAINS(rejection("axpy", {r(x), rw(y), text("2")}), "argument 3 'alpha' must be a real number, got the string");
  EXPECT_CONTAINS(rejection("gemm", {r(a), r(a), rw(a), num(1), num(0), num(0.5)}), "argument 6 'trans_a' must be an integer");
  EXPECT_EQ(rejection("axpy", {r(x), r(y), num(2)}),
            "task 'T' (kernel axpy): argument 2 'y' is written by the kernel but passed as read; pass ferry::readwrite(y)");
  EXPECT_CONTAINS(rejection("copy", {buf(x.arg(AccessMode::write)), buf(y.arg(AccessMode::write))}),
                  "argument 1 'x' is read by the kernel but passed as write; pass ferry::read(x)");
  EXPECT_CONTAINS(rejection("axpy", {buf(xi.arg(AccessMode::read)), rw(y)}),
                  std::string("argument 1 'x' has element type ") + ferry::to_string(ferry::DType::i32) +
                      "; the kernel accepts " + ferry::to_string(ferry::DType::f32) + ", " +
                      ferry::to_string(ferry::DType::f64));
  EXPECT_CONTAINS(rejection("axpy", {buf(xd.arg(AccessMode::read)), rw(y)}), "share an element type");
  EXPECT_CONTAINS(rejection("axpy", {r(x), rw(z)}), "y is 1 x 5 but x is 1 x 4");
  EXPECT_EQ(rejection("gemm", {r(a), r(b), rw(c)}),
            "task 'T' (kernel gemm): a is 3 x 4 but b is 5 x 2: inner dimensions 4 and 5 differ");
  EXPECT_CONTAINS(rejection("gemm", {r(a), r(a), rw(rect), num(1), num(0), whole(0), whole(1)}),
                  "c is 3 x 4 but a * b^T is 3 x 3");
  EXPECT_CONTAINS(rejection("gemm", {r(a), r(a), rw(a), num(1), num(0), whole(2)}), "trans_a is 2; it must be 0 or 1");
  EXPECT_CONTAINS(rejection("potrf", {rw(rect)}), "task 'T' (kernel potrf): a is 3 x 4; it must be square");
  EXPECT_CONTAINS(rejection("trsm", {r(sq), rw(rect)}), "b is 3 x 4 but l is 3 x 3");
  EXPECT_CONTAINS(rejection("syrk", {r(a), rw(rect)}), "c is 3 x 4; it must be square");
  const std::string op = rejection("map", {r(x), buf(y.arg(AccessMode::write)), text("cube")});
  EXPECT_CONTAINS(op, "op 'cube' is unknown; map knows copy, neg, abs, sqrt, exp, log, square, relu, sigmoid, scale");
  EXPECT_CONTAINS(rejection("fill", {buf(xi.arg(AccessMode::write)), num(2.5)}), "value 2.5 cannot be stored in x");
  EXPECT_CONTAINS(rejection("gemm", {r(a), r(b), rw(c), num(1), num(0), whole(1), whole(1)}),
                  "a^T is 4 x 3 but b^T is 2 x 5: inner dimensions 3 and 2 differ");
}

TEST(KernelArgsCheck, FillsDefaultsAndConvertsNumbers) {
  Mat<double> a(2, 3), b(3, 2), c(2, 2);
  KernelArgs args{{buf(a.arg(AccessMode::read)), buf(b.arg(AccessMode::read)), buf(c.arg(AccessMode::readwrite)),
                   whole(2)}};
  ferry::check_arguments(kernel("gemm"), args, "t");
  ASSERT_EQ(args.size(), 7u);
  EXPECT_EQ(args.real(3), 2.0);  // the integer 2 became a real
  EXPECT_TRUE(std::holds_alternative<double>(std::get<ScalarValue>(args[3])));
  EXPECT_EQ(args.real(4), 0.0);
  EXPECT_EQ(args.integer(5), 0);
  EXPECT_EQ(args.integer(6), 0);
  EXPECT_EQ(kernel("gemm").cost(args).flops, 2.0 * 2 * 2 * 3);

  KernelArgs integral{{buf(a.arg(AccessMode::read)), buf(a.arg(AccessMode::read)), buf(c.arg(AccessMode::readwrite)),
                       num(1), num(0), num(0), num(1.0)}};
  ferry::check_arguments(kernel("gemm"), integral, "t");
  EXPECT_EQ(integral.integer(6), 1);

  // A kind mismatch in a kernel's own accessor is a kernel bug, not a usage error.
  EXPECT_THROW(args.text(3), ferry::Error);
  EXPECT_THROW(args.buffer(3), ferry::Error);
  EXPECT_THROW(args.integer(0), ferry::Error);
}

// What `chunkable` promises, and automatic chunking relies on: running the
// kernel piece by piece over sub-ranges of its buffers (element ranges of a
// vector, row blocks of a matrix) gives exactly what one run over the whole
// gives.
TEST(KernelRegistry, ChunkableKernelsGiveTheSameResultPieceByPiece) {
  struct Call {
    std::string name;
    std::size_t buffers;
    std::vector<Arg> scalars;
  };
  const std::vector<Call> calls = {{"fill", 1, {num(2.5)}},
                                   {"copy", 2, {}},
                                   {"map", 2, {text("sigmoid")}},
                                   {"axpy", 2, {num(-1.5)}},
                                   {"scal", 1, {num(3.0)}}};
  std::set<std::string> marked, covered;
  for (const std::string& name : ferry::KernelRegistry::global().names())
    if (kernel(name).chunkable) marked.insert(name);
  struct Piece {
    std::size_t r0, c0, rows, cols;
  };
  struct Shape {
    std::size_t rows, cols;
    std::vector<Piece> pieces;
  };
  const std::vector<Shape> shapes = {{1, 37, {{0, 0, 1, 15}, {0, 15, 1, 22}}},  // a vector by elements
                                     {6, 5, {{0, 0, 2, 5}, {2, 0, 4, 5}}}};     // a matrix by rows
  for (const Call& c : calls) {
    SCOPED_TRACE(c.name);
    covered.insert(c.name);
    const auto& params = kernel(c.name).params;
    for (const Shape& shape : shapes) {
      Mat<double> whole_x(shape.rows, shape.cols), whole_y(shape.rows, shape.cols);
      whole_x.randomize(1);
      whole_y.randomize(2);
      Mat<double> pieces_x = whole_x, pieces_y = whole_y;
      const auto call = [&](Mat<double>& x, Mat<double>& y, const Piece& p) {
        std::vector<Arg> items{buf(x.tile(p.r0, p.c0, p.rows, p.cols, params[0].mode))};
        if (c.buffers == 2) items.push_back(buf(y.tile(p.r0, p.c0, p.rows, p.cols, params[1].mode)));
        items.insert(items.end(), c.scalars.begin(), c.scalars.end());
        run(c.name, std::move(items));
      };
      call(whole_x, whole_y, Piece{0, 0, shape.rows, shape.cols});
      for (const Piece& p : shape.pieces) call(pieces_x, pieces_y, p);
      EXPECT_EQ(pieces_x.v, whole_x.v) << shape.rows << " x " << shape.cols;
      EXPECT_EQ(pieces_y.v, whole_y.v) << shape.rows << " x " << shape.cols;
    }
  }
  EXPECT_EQ(covered, marked) << "every kernel marked chunkable must be called here, and only those";
}

TEST(KernelRegistry, BuiltinsAndRegistrationRules) {
  auto& registry = ferry::KernelRegistry::global();
  for (const char* name :
       {"axpy", "scal", "dot", "nrm2", "gemm", "potrf", "trsm", "syrk", "gesdd", "syevd", "geqrf", "fill", "copy", "map", "sum"}) {
    const ferry::KernelDef* k = registry.find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_FALSE(k->summary.empty()) << name;
    EXPECT_TRUE(k->cpu && k->cost) << name;
  }
  EXPECT_TRUE(kernel("dot").returns_scalar && kernel("sum").returns_scalar && kernel("nrm2").returns_scalar);
  EXPECT_EQ(registry.find("no_such_kernel"), nullptr);

  ferry::KernelRegistry local;
  ferry::KernelDef def;
  def.name = "twice";
  EXPECT_THROW(local.add(def), ferry::UsageError);  // no implementation
  def.cpu = [](ferry::ExecContext&) {};
  local.add(def);
  ASSERT_NE(local.find("twice"), nullptr);
  EXPECT_TRUE(local.find("twice")->cost);  // a bytes-only hint stands in
  try {
    local.add(def);
    ADD_FAILURE() << "duplicate accepted";
  } catch (const ferry::UsageError& e) {
    EXPECT_CONTAINS(e.what(), "'twice' is already registered");
  }
  def.name = "";
  EXPECT_THROW(local.add(def), ferry::UsageError);

  // Static registrations keep their errors for later instead of throwing.
  ferry::detail::take_registration_errors();
  const ferry::detail::KernelRegistration clash{[] {
    ferry::KernelDef k;
    k.name = "axpy";
    k.cpu = [](ferry::ExecContext&) {};
    return k;
  }};
  const auto errors = ferry::detail::take_registration_errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_CONTAINS(errors[0], "'axpy' is already registered");
}

}  // namespace
