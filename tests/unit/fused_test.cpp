// The fused elementwise kernels (fused0 ... fused8) against scalar loops:
// arithmetic with NumPy's rounding rules, broadcasting by strides, casts,
// folds (reductions), positions and the counter-based generators, and the
// errors a bad program gets.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"
#include "fused_cuda.hpp"

namespace {

using ferry::AccessMode;
using ferry::Arg;
using ferry::BufferArg;
using ferry::DType;
using ferry::KernelArgs;

template <typename T>
Arg buf(std::vector<T>& v, AccessMode mode) {
  return Arg{BufferArg{v.data(), ferry::dtype_of<T>(), 1, v.size(), v.size(), mode}};
}
// std::vector<bool> has no data(): bools (b8) live in a vector of bytes.
template <typename T>
Arg buf_as(std::vector<T>& v, DType type, AccessMode mode) {
  return Arg{BufferArg{v.data(), type, 1, v.size() * sizeof(T) / ferry::size_of(type), v.size(), mode}};
}
Arg text(std::string s) {
  return Arg{ferry::ScalarValue{std::move(s)}};
}

const ferry::KernelDef& fused(std::size_t inputs) {
  return *ferry::KernelRegistry::global().find("fused" + std::to_string(inputs));
}

void run(std::vector<Arg> buffers, const std::string& program) {
  const std::size_t inputs = buffers.size() - 1;
  buffers.push_back(text(program));
  KernelArgs args{std::move(buffers)};
  ferry::check_arguments(fused(inputs), args, "t");
  const std::string task = "t";
  ferry::ExecContext ctx{.args = args, .task_name = task, .worker = 0, .stream = nullptr, .device = -1,
                         .result = std::nullopt};
  fused(inputs).cpu(ctx);
}

std::string rejection(std::vector<Arg> buffers, const std::string& program) {
  try {
    run(std::move(buffers), program);
  } catch (const ferry::UsageError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

template <typename T>
std::vector<T> random_vector(std::size_t n, unsigned seed, double lo = -2, double hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

TEST(Fused, ChainOverManyBlocksMatchesScalarLoop) {
  const std::size_t n = 5000;  // several 1024-element blocks and a partial one
  auto a = random_vector<float>(n, 1), b = random_vector<float>(n, 2);
  std::vector<float> y(n);
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)},
      "d=5000 x0 f32:2 mul x1 sub sigmoid x0 abs neg exp add x1 f32:0.5 maximum mul");
  for (std::size_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-(a[i] * 2.0f - b[i])));
    const float want = (s + std::exp(-std::abs(a[i]))) * std::max(b[i], 0.5f);
    ASSERT_NEAR(y[i], want, 1e-6f * std::max(1.0f, std::abs(want))) << i;
  }
}

TEST(Fused, BroadcastsByStrides) {
  // y (3 x 1500) = x0 (3 x 1500) * x1 (1500, a row) + x2 (3, a column) + x3 (one value)
  const std::size_t r = 3, c = 1500;
  auto m = random_vector<double>(r * c, 3), row = random_vector<double>(c, 4), col = random_vector<double>(r, 5);
  std::vector<double> one{10.0}, y(r * c);
  run({buf(y, AccessMode::write), buf(m, AccessMode::read), buf(row, AccessMode::read), buf(col, AccessMode::read),
       buf(one, AccessMode::read)},
      "d=3,1500 s1=0,1 s2=1,0 s3=0,0 x0 x1 mul x2 add x3 add");
  for (std::size_t i = 0; i < r; ++i) {
    for (std::size_t j = 0; j < c; ++j) ASSERT_DOUBLE_EQ(y[i * c + j], m[i * c + j] * row[j] + col[i] + 10.0);
  }
}

TEST(Fused, ShortRowsPackIntoBlocks) {
  // 3000 rows of 3: full, row-broadcast, column-broadcast and scalar inputs,
  // the case a block of whole rows serves.
  const std::size_t r = 3000, c = 3;
  auto m = random_vector<float>(r * c, 7), row = random_vector<float>(c, 8), col = random_vector<float>(r, 9);
  std::vector<float> one{0.5f}, y(r * c);
  run({buf(y, AccessMode::write), buf(m, AccessMode::read), buf(row, AccessMode::read), buf(col, AccessMode::read),
       buf(one, AccessMode::read)},
      "d=3000,3 s1=0,1 s2=1,0 s3=0,0 x0 x1 sub x2 mul x3 add");
  for (std::size_t i = 0; i < r; ++i) {
    for (std::size_t j = 0; j < c; ++j) ASSERT_EQ(y[i * c + j], (m[i * c + j] - row[j]) * col[i] + 0.5f) << i << "," << j;
  }
}

TEST(Fused, IntegerDivisionRoundsTowardMinusInfinity) {
  std::vector<std::int64_t> a{7, -7, 7, -7, 5, std::numeric_limits<std::int64_t>::min()};
  std::vector<std::int64_t> b{2, 2, -2, -2, 0, -1};
  std::vector<std::int64_t> q(a.size()), r(a.size());
  run({buf(q, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=6 x0 x1 floordiv");
  run({buf(r, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=6 x0 x1 mod");
  EXPECT_EQ(q, (std::vector<std::int64_t>{3, -4, -4, 3, 0, std::numeric_limits<std::int64_t>::min()}));
  EXPECT_EQ(r, (std::vector<std::int64_t>{1, 1, -1, -1, 0, 0}));

  std::vector<double> fa{7.5, -7.5, 7.5}, fb{2, 2, -2}, fr(3);
  run({buf(fr, AccessMode::write), buf(fa, AccessMode::read), buf(fb, AccessMode::read)}, "d=3 x0 x1 mod");
  EXPECT_EQ(fr, (std::vector<double>{1.5, 0.5, -0.5}));
  std::vector<double> one{1.0}, tenth{0.1}, fq(1);
  run({buf(fq, AccessMode::write), buf(one, AccessMode::read), buf(tenth, AccessMode::read)}, "d=1 x0 x1 floordiv");
  EXPECT_EQ(fq[0], 9.0);  // as Python and NumPy: 1.0 // 0.1 == 9.0

  std::vector<std::int32_t> base{2, -3, 1, 2}, e{10, 3, -5, -1}, p(4);
  run({buf(p, AccessMode::write), buf(base, AccessMode::read), buf(e, AccessMode::read)}, "d=4 x0 x1 pow");
  EXPECT_EQ(p, (std::vector<std::int32_t>{1024, -27, 1, 0}));
}

TEST(Fused, ComparisonsWhereClipAndNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x{-3, 0.5, 4, nan}, y(4);
  std::vector<std::uint8_t> flags(4);  // bools (b8) read as bytes
  run({buf_as(flags, DType::b8, AccessMode::write), buf(x, AccessMode::read)}, "d=4 x0 f64:0 gt x0 isnan or");
  EXPECT_EQ(flags, (std::vector<std::uint8_t>{0, 1, 1, 1}));
  run({buf(y, AccessMode::write), buf(x, AccessMode::read)}, "d=4 x0 f64:1 lt x0 f64:-1 f64:1 clip f64:7 where");
  EXPECT_EQ(y[0], -1);
  EXPECT_EQ(y[1], 0.5);
  EXPECT_EQ(y[2], 7);
  EXPECT_EQ(y[3], 7);  // nan < 1 is false
  std::vector<double> clipped(4);
  run({buf(clipped, AccessMode::write), buf(x, AccessMode::read)}, "d=4 x0 f64:-1 f64:1 clip");
  EXPECT_TRUE(std::isnan(clipped[3]));  // NaN goes through clip as NaN
}

TEST(Fused, WideningResultsDoNotOverwriteTheirOperands) {
  // A broadcast bool widened to i32, and where() choosing f64 by a bool
  // computed in the same register: both results are wider than the operand.
  std::vector<std::int32_t> a{-1, 0, 5, 7}, y(4);
  std::vector<std::uint8_t> truth{1};
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf_as(truth, DType::b8, AccessMode::read)},
      "d=4 s1=0 x0 x1 as:i32 add");
  EXPECT_EQ(y, (std::vector<std::int32_t>{0, 1, 6, 8}));
  std::vector<double> w(4);
  run({buf(w, AccessMode::write), buf(a, AccessMode::read)}, "d=4 x0 i32:0 gt f64:1.5 f64:-1 where");
  EXPECT_EQ(w, (std::vector<double>{-1, -1, 1.5, 1.5}));
}

// The array API's integer types wrap as NumPy's do; floor division and
// modulo of unsigned values; constants past 2^63 in u64; folds start at the
// type's own extremes (min of u8 starts at 255, not at a bool's 1).
TEST(Fused, SmallAndUnsignedIntegersFollowNumPy) {
  std::vector<std::int8_t> a{100, -128, -7, 7}, s(4);
  run({buf(s, AccessMode::write), buf(a, AccessMode::read)}, "d=4 x0 x0 add");
  EXPECT_EQ(s, (std::vector<std::int8_t>{-56, 0, -14, 14}));
  run({buf(s, AccessMode::write), buf(a, AccessMode::read)}, "d=4 x0 i8:2 floordiv");
  EXPECT_EQ(s, (std::vector<std::int8_t>{50, -64, -4, 3}));
  run({buf(s, AccessMode::write), buf(a, AccessMode::read)}, "d=4 x0 abs");
  EXPECT_EQ(s, (std::vector<std::int8_t>{100, -128, 7, 7}));  // abs(-128) wraps to -128
  run({buf(s, AccessMode::write), buf(a, AccessMode::read)}, "d=4 x0 neg");
  EXPECT_EQ(s, (std::vector<std::int8_t>{-100, -128, 7, -7}));

  std::vector<std::uint16_t> u{65535, 7, 0, 300}, v(4);
  run({buf(v, AccessMode::write), buf(u, AccessMode::read)}, "d=4 x0 u16:1 add");
  EXPECT_EQ(v, (std::vector<std::uint16_t>{0, 8, 1, 301}));
  run({buf(v, AccessMode::write), buf(u, AccessMode::read)}, "d=4 x0 u16:3 mod x0 u16:3 floordiv add");
  EXPECT_EQ(v, (std::vector<std::uint16_t>{21845, 3, 0, 100}));
  run({buf(v, AccessMode::write), buf(u, AccessMode::read)}, "d=4 x0 neg");
  EXPECT_EQ(v, (std::vector<std::uint16_t>{1, 65529, 0, 65236}));
  run({buf(v, AccessMode::write), buf(u, AccessMode::read)}, "d=4 x0 sign");
  EXPECT_EQ(v, (std::vector<std::uint16_t>{1, 1, 0, 1}));

  std::vector<std::uint64_t> big{1, 2}, w(2);
  run({buf(w, AccessMode::write), buf(big, AccessMode::read)}, "d=2 x0 u64:18446744073709551615 xor");
  EXPECT_EQ(w, (std::vector<std::uint64_t>{18446744073709551614ULL, 18446744073709551613ULL}));
  run({buf(w, AccessMode::write), buf(big, AccessMode::read)}, "d=2 x0 u64:9223372036854775808 lt x0 x0 where");
  EXPECT_EQ(w, big);

  std::vector<std::uint8_t> bytes{200, 100, 250}, low{0}, high{0};
  run({buf(low, AccessMode::write), buf(bytes, AccessMode::read)}, "d=3 y=0 f=min x0");
  run({buf(high, AccessMode::write), buf(bytes, AccessMode::read)}, "d=3 y=0 f=max x0");
  EXPECT_EQ(low[0], 100);
  EXPECT_EQ(high[0], 250);
  std::vector<std::uint8_t> none{7}, empty;
  run({buf(none, AccessMode::write), buf(empty, AccessMode::read)}, "d=0 y=0 f=min x0");
  EXPECT_EQ(none[0], 255);

  // Bools compare (false < true) and take or/and-like arithmetic only: sub is refused.
  std::vector<std::uint8_t> p{0, 1, 1}, q{1, 1, 0}, less(3);
  run({buf_as(less, DType::b8, AccessMode::write), buf_as(p, DType::b8, AccessMode::read),
       buf_as(q, DType::b8, AccessMode::read)}, "d=3 x0 x1 lt x0 x1 eq or");
  EXPECT_EQ(less, (std::vector<std::uint8_t>{1, 1, 0}));
  std::vector<std::uint8_t> flags{1, 0}, out(2);
  EXPECT_CONTAINS(rejection({buf_as(out, DType::b8, AccessMode::write), buf_as(flags, DType::b8, AccessMode::read)},
                            "d=2 x0 x0 sub"),
                  "does not take b8");
}

// Complex numbers: NumPy's quotient formula (bit for bit), abs as hypot,
// real/imag/conj, sums, casts dropping the imaginary part, and the
// operations the array API leaves undefined for them refused.
TEST(Fused, ComplexNumbersFollowNumPy) {
  using C = std::complex<double>;
  std::vector<C> a{{1, 2}, {3, -4}, {-0.5, 0.25}}, b{{3, 4}, {0.5, 7}, {2, 0}}, q(3), y(3);
  run({buf(q, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=3 x0 x1 div");
  for (std::size_t i = 0; i < 3; ++i) {  // npymath's Smith division, written out
    const double br = b[i].real(), bi = b[i].imag();
    C want;
    if (std::fabs(br) >= std::fabs(bi)) {
      const double rat = bi / br, scl = 1.0 / (br + bi * rat);
      want = C((a[i].real() + a[i].imag() * rat) * scl, (a[i].imag() - a[i].real() * rat) * scl);
    } else {
      const double rat = br / bi, scl = 1.0 / (bi + br * rat);
      want = C((a[i].real() * rat + a[i].imag()) * scl, (a[i].imag() * rat - a[i].real()) * scl);
    }
    EXPECT_EQ(q[i], want);
  }
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=3 x0 x1 mul x0 conj add");
  EXPECT_EQ(y[0], C(1 * 3 - 2 * 4, 1 * 4 + 2 * 3) + C(1, -2));
  run({buf(y, AccessMode::write), buf(a, AccessMode::read)}, "d=3 x0 c128:1.5,-2 add");
  EXPECT_EQ(y[1], C(4.5, -6));
  std::vector<double> r(3);
  run({buf(r, AccessMode::write), buf(a, AccessMode::read)}, "d=3 x0 abs");
  EXPECT_EQ(r[1], 5.0);
  run({buf(r, AccessMode::write), buf(a, AccessMode::read)}, "d=3 x0 imag");
  EXPECT_EQ(r, (std::vector<double>{2, -4, 0.25}));
  run({buf(r, AccessMode::write), buf(a, AccessMode::read)}, "d=3 x0");  // c128 into f64: the real part
  EXPECT_EQ(r, (std::vector<double>{1, 3, -0.5}));
  std::vector<C> total(1);
  run({buf(total, AccessMode::write), buf(a, AccessMode::read)}, "d=3 y=0 f=add x0");
  EXPECT_EQ(total[0], C(3.5, -1.75));
  std::vector<std::complex<float>> e(3);
  run({buf(e, AccessMode::write), buf(a, AccessMode::read)}, "d=3 x0 exp as:c64");
  EXPECT_NEAR(e[0].real(), std::exp(1.0) * std::cos(2.0), 1e-6);
  EXPECT_NEAR(e[0].imag(), std::exp(1.0) * std::sin(2.0), 1e-6);
  std::vector<std::uint8_t> flags(3);
  EXPECT_CONTAINS(rejection({buf_as(flags, DType::b8, AccessMode::write), buf(a, AccessMode::read),
                             buf(b, AccessMode::read)}, "d=3 x0 x1 lt"),
                  "does not take complex numbers");
  EXPECT_CONTAINS(rejection({buf(total, AccessMode::write), buf(a, AccessMode::read)}, "d=3 y=0 f=max x0"),
                  "cannot fold with min or max");
}

TEST(Fused, AbsOfNegativeZeroIsPositive) {
  std::vector<double> x{-0.0, -1.5, 0.0}, y(3);
  run({buf(y, AccessMode::write), buf(x, AccessMode::read)}, "d=3 x0 abs");
  EXPECT_FALSE(std::signbit(y[0]));
  EXPECT_EQ(y[1], 1.5);
  std::vector<float> xf{-0.0f}, yf(1);
  run({buf(yf, AccessMode::write), buf(xf, AccessMode::read)}, "d=1 x0 abs");
  EXPECT_FALSE(std::signbit(yf[0]));
  EXPECT_CONTAINS(ferry::kernels::fused_cuda_source("d=1 x0 abs", {DType::f32}, DType::f32, "k"),
                  "fnp_abs(float a) { return fabsf(a); }");
}

// The array API's trigonometric, rounding and two-argument functions, with
// the special cases NumPy gives (signed zeros, halves to even, NumPy's shifts
// past the width).
TEST(Fused, MoreFunctionsFollowNumPy) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x{-0.0, 0.5, -2.5, 3.5}, y(4);
  const auto one = [&](const char* code) {
    run({buf(y, AccessMode::write), buf(x, AccessMode::read)}, std::string("d=4 x0 ") + code);
    return y;
  };
  EXPECT_EQ(one("round"), (std::vector<double>{-0.0, 0.0, -2.0, 4.0}));
  EXPECT_TRUE(std::signbit(one("round")[0]));
  EXPECT_EQ(one("trunc"), (std::vector<double>{-0.0, 0.0, -2.0, 3.0}));
  EXPECT_TRUE(std::signbit(one("expm1")[0]));
  EXPECT_EQ(one("tan")[1], std::tan(0.5));
  EXPECT_EQ(one("asinh")[2], std::asinh(-2.5));
  EXPECT_EQ(one("log2")[1], -1.0);
  EXPECT_TRUE(std::isnan(one("acos")[2]));
  std::vector<std::uint8_t> sign(4);
  run({buf_as(sign, DType::b8, AccessMode::write), buf(x, AccessMode::read)}, "d=4 x0 signbit");
  EXPECT_EQ(sign, (std::vector<std::uint8_t>{1, 0, 1, 0}));

  std::vector<double> a{inf, -inf, 1.0, -0.0}, b{inf, 2.0, -0.0, 3.0};
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=4 x0 x1 logaddexp");
  EXPECT_EQ(y[0], inf);
  EXPECT_NEAR(y[1], 2.0, 1e-15);
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=4 x0 x1 copysign");
  EXPECT_EQ(y, (std::vector<double>{inf, inf, -1.0, 0.0}));
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=4 x0 x1 atan2");
  EXPECT_EQ(y[3], -0.0);
  EXPECT_TRUE(std::signbit(y[3]));

  std::vector<std::int8_t> i{-128, 5, -3, 1}, s{1, 9, 200 - 256, 7}, r(4);
  run({buf(r, AccessMode::write), buf(i, AccessMode::read), buf(s, AccessMode::read)}, "d=4 x0 x1 shl");
  EXPECT_EQ(r, (std::vector<std::int8_t>{0, 0, 0, -128}));
  run({buf(r, AccessMode::write), buf(i, AccessMode::read), buf(s, AccessMode::read)}, "d=4 x0 x1 shr");
  EXPECT_EQ(r, (std::vector<std::int8_t>{-64, 0, -1, 0}));

  using C = std::complex<double>;
  std::vector<C> z{{0.5, -2.0}, {-1.5, 0.25}}, w(2);
  for (const auto& [code, f] : std::vector<std::pair<std::string, C (*)(const C&)>>{
           {"tan", std::tan}, {"asin", std::asin}, {"acos", std::acos}, {"atan", std::atan}, {"sinh", std::sinh},
           {"cosh", std::cosh}, {"asinh", std::asinh}, {"acosh", std::acosh}, {"atanh", std::atanh}}) {
    run({buf(w, AccessMode::write), buf(z, AccessMode::read)}, "d=2 x0 " + code);
    EXPECT_EQ(w[0], f(z[0])) << code;
  }
  // The array API's special cases where NumPy's complex expm1 and tanh differ.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<C> edge{{-0.0, 0.0}, {inf, 0.0}, {inf, 2.0}, {nan, 0.0}}, e(4);
  run({buf(e, AccessMode::write), buf(edge, AccessMode::read)}, "d=4 x0 expm1");
  EXPECT_FALSE(std::signbit(e[0].real()));
  EXPECT_EQ(e[1], C(inf, 0.0));
  EXPECT_TRUE(std::isnan(e[3].real()));
  EXPECT_EQ(e[3].imag(), 0.0);
  run({buf(e, AccessMode::write), buf(edge, AccessMode::read)}, "d=4 x0 tanh");
  EXPECT_EQ(e[2], C(1.0, 0.0));
  EXPECT_FALSE(std::signbit(e[2].imag()));  // C's ctanh gives 1 - 0j here: sin(4) < 0
  run({buf(w, AccessMode::write), buf(z, AccessMode::read)}, "d=2 x0 round");
  EXPECT_EQ(w[1], C(-2.0, 0.0));
  EXPECT_CONTAINS(rejection({buf(w, AccessMode::write), buf(z, AccessMode::read)}, "d=2 x0 trunc"),
                  "does not take complex numbers");
  EXPECT_CONTAINS(rejection({buf(y, AccessMode::write), buf(x, AccessMode::read)}, "d=4 x0 x0 shl"), "takes integers");
  EXPECT_CONTAINS(rejection({buf(r, AccessMode::write), buf(i, AccessMode::read)}, "d=4 x0 x0 hypot"),
                  "takes f32 or f64");
}

TEST(Fused, CastsFollowNumPy) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x{2.9, -2.9, nan, 1e300, 0};
  std::vector<std::int32_t> i(5);
  std::vector<std::uint8_t> b(5);
  run({buf(i, AccessMode::write), buf(x, AccessMode::read)}, "d=5 x0 as:i32");
  EXPECT_EQ(i, (std::vector<std::int32_t>{2, -2, std::numeric_limits<std::int32_t>::min(),
                                          std::numeric_limits<std::int32_t>::min(), 0}));
  run({buf_as(b, DType::b8, AccessMode::write), buf(x, AccessMode::read)}, "d=5 x0 as:b8");
  EXPECT_EQ(b, (std::vector<std::uint8_t>{1, 1, 1, 1, 0}));  // a truth test: NaN is true
  // Integer to integer casts wrap, as NumPy's: 300 and -1 as u8.
  std::vector<std::int64_t> wide{300, -1, 255};
  std::vector<std::uint8_t> narrow(3);
  run({buf(narrow, AccessMode::write), buf(wide, AccessMode::read)}, "d=3 x0 as:u8");
  EXPECT_EQ(narrow, (std::vector<std::uint8_t>{44, 255, 255}));
  // The result meets y's element type at the end: f64 into f32.
  std::vector<float> f(5);
  run({buf(f, AccessMode::write), buf(x, AccessMode::read)}, "d=5 x0 f64:2 mul");
  EXPECT_FLOAT_EQ(f[0], 5.8f);
}

TEST(Fused, FoldsReduceAlongZeroStrides) {
  const std::size_t r = 4, c = 3000;
  auto m = random_vector<double>(r * c, 6);
  std::vector<double> rows(r), cols(c), all(1), mx(1);
  run({buf(rows, AccessMode::write), buf(m, AccessMode::read)}, "d=4,3000 y=1,0 f=add x0");
  run({buf(cols, AccessMode::write), buf(m, AccessMode::read)}, "d=4,3000 y=0,1 f=add x0");
  run({buf(all, AccessMode::write), buf(m, AccessMode::read)}, "d=12000 y=0 f=add x0 square");
  run({buf(mx, AccessMode::write), buf(m, AccessMode::read)}, "d=12000 y=0 f=max x0");
  double total = 0, biggest = -1e300;
  for (std::size_t i = 0; i < r; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < c; ++j) s += m[i * c + j];
    EXPECT_NEAR(rows[i], s, 1e-9);
  }
  for (std::size_t j = 0; j < c; ++j) {
    double s = 0;
    for (std::size_t i = 0; i < r; ++i) s += m[i * c + j];
    EXPECT_NEAR(cols[j], s, 1e-12);
  }
  for (double v : m) {
    total += v * v;
    biggest = std::max(biggest, v);
  }
  EXPECT_NEAR(all[0], total, 1e-8);
  EXPECT_EQ(mx[0], biggest);

  // An argmin: the first position holding the minimum.
  std::vector<double> x{3, 1, 2, 1}, low{1};
  std::vector<std::int64_t> arg(1);
  run({buf(arg, AccessMode::write), buf(x, AccessMode::read), buf(low, AccessMode::read)},
      "d=4 s1=0 y=0 f=min x0 x1 eq i0 i64:9223372036854775807 where");
  EXPECT_EQ(arg[0], 1);

  // Nothing to fold: y holds the identity (sum of none is 0, all() of none is true).
  std::vector<double> empty, zero{5};
  std::vector<std::uint8_t> truth{0};
  run({buf(zero, AccessMode::write), buf(empty, AccessMode::read)}, "d=0 y=0 f=add x0");
  run({buf_as(truth, DType::b8, AccessMode::write), buf(empty, AccessMode::read)}, "d=0 y=0 f=min x0 f64:0 ne");
  EXPECT_EQ(zero[0], 0);
  EXPECT_EQ(truth[0], 1);
}

TEST(Fused, PositionsAndGeneratorsDoNotDependOnTiling) {
  // arange and a 3 x 4 identity from positions alone (fused0).
  std::vector<double> ar(5);
  run({buf(ar, AccessMode::write)}, "d=5 o=10 i0 as:f64 f64:0.5 mul");
  EXPECT_EQ(ar, (std::vector<double>{5, 5.5, 6, 6.5, 7}));
  std::vector<float> eye(12);
  run({buf(eye, AccessMode::write)}, "d=3,4 i0 i1 eq as:f32");
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(eye[i * 4 + j], i == j ? 1.0f : 0.0f);
  }
  // 3000 uniforms at once, or as two tiles with offsets: the same numbers.
  std::vector<double> whole(3000), first(1000), second(2000);
  run({buf(whole, AccessMode::write)}, "d=3000 i0 uniform:42");
  run({buf(first, AccessMode::write)}, "d=1000 i0 uniform:42");
  run({buf(second, AccessMode::write)}, "d=2000 o=1000 i0 uniform:42");
  double mean = 0;
  for (std::size_t i = 0; i < 3000; ++i) {
    ASSERT_EQ(whole[i], i < 1000 ? first[i] : second[i - 1000]);
    ASSERT_GE(whole[i], 0.0);
    ASSERT_LT(whole[i], 1.0);
    mean += whole[i] / 3000;
  }
  EXPECT_NEAR(mean, 0.5, 0.03);
  std::vector<double> normals(4000), other_seed(4000);
  run({buf(normals, AccessMode::write)}, "d=4000 i0 normal:7");
  run({buf(other_seed, AccessMode::write)}, "d=4000 i0 normal:8");
  double m = 0, sq = 0;
  for (double v : normals) {
    m += v / 4000;
    sq += v * v / 4000;
  }
  EXPECT_NEAR(m, 0.0, 0.08);
  EXPECT_NEAR(sq, 1.0, 0.1);
  EXPECT_NE(normals, other_seed);
}

// A broadcast that alternates on every axis keeps all of them: six
// dimensions, a 2x1x3x1x2x1 operand against a 1x3x1x2x1x2 one.
TEST(Fused, SixAlternatingDimensionsWalkEveryPosition) {
  std::vector<double> a(12), b(12), y(144);
  for (std::size_t i = 0; i < 12; ++i) a[i] = static_cast<double>(i), b[i] = 100.0 * static_cast<double>(i);
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)},
      "d=2,3,3,2,2,2 s0=6,0,2,0,1,0 s1=0,4,0,2,0,1 x0 x1 add");
  std::size_t e = 0;
  for (std::size_t i0 = 0; i0 < 2; ++i0)
    for (std::size_t i1 = 0; i1 < 3; ++i1)
      for (std::size_t i2 = 0; i2 < 3; ++i2)
        for (std::size_t i3 = 0; i3 < 2; ++i3)
          for (std::size_t i4 = 0; i4 < 2; ++i4)
            for (std::size_t i5 = 0; i5 < 2; ++i5, ++e)
              ASSERT_EQ(y[e], a[i0 * 6 + i2 * 2 + i4] + b[i1 * 4 + i3 * 2 + i5]) << e;
}

TEST(Fused, ThreeDimensionalBroadcastWalksEveryPosition) {
  // (2, 3, 4) + (2, 1, 4): the middle dimension broadcasts, so nothing merges.
  std::vector<std::int32_t> a(24), b(8), y(24);
  for (int i = 0; i < 24; ++i) a[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = 100 * i;
  run({buf(y, AccessMode::write), buf(a, AccessMode::read), buf(b, AccessMode::read)}, "d=2,3,4 s1=4,0,1 x0 x1 add");
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) EXPECT_EQ(y[static_cast<std::size_t>(i * 12 + j * 4 + k)], i * 12 + j * 4 + k + 100 * (i * 4 + k));
    }
  }
}

TEST(Fused, BadProgramsAreRefusedNamingTheToken) {
  std::vector<float> x(4), y(4);
  std::vector<double> d(4);
  const auto out = [&] { return buf(y, AccessMode::write); };
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 x0 frobnicate"), "'frobnicate' is no instruction");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read), buf(d, AccessMode::read)}, "d=4 x0 x1 add"),
                  "one element type");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 x0 x0"), "leaves 2 values");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 add"), "needs 2 operands");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=8 x0"), "holds 4 elements");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 x1"), "loads input 1");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 y=0 x0"), "no fold");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 x0 as:i32 exp"), "takes f32, f64, c64 or c128");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "d=4 x0 f32:abc add"), "not a number");
  EXPECT_CONTAINS(rejection({out(), buf(x, AccessMode::read)}, "x0"), "before the code");
  EXPECT_EQ(rejection({out(), buf(x, AccessMode::read)}, "d=4 x0 f32:1 add"), "");
}

// The CUDA source of a program: the same expression, statement by statement
// (NVRTC compiles it in fused_cuda_test where the build has CUDA).
TEST(FusedCudaSource, FollowsTheProgram) {
  const std::string src = ferry::kernels::fused_cuda_source(
      "d=3,1500 s1=0,1 x0 x1 mul f32:0.5 maximum i1 as:f32 add", {DType::f32, DType::f32}, DType::f64, "k");
  EXPECT_CONTAINS(src, "extern \"C\" __global__ void k(long long n, double* __restrict__ y, "
                       "const float* __restrict__ x0, const float* __restrict__ x1)");
  EXPECT_CONTAINS(src, "const long long p1 = r % 1500LL; r /= 1500LL;");
  EXPECT_CONTAINS(src, "const long long o0 = 0 + p0 * 1500LL + p1 * 1LL;");
  EXPECT_CONTAINS(src, "const long long o1 = 0 + p1 * 1LL;");  // broadcast along the rows
  EXPECT_CONTAINS(src, "const float v2 = (float)(v0 * v1);");
  EXPECT_CONTAINS(src, "const float v4 = fnp_max(v2, v3);");
  EXPECT_CONTAINS(src, "const float v3 = 0.5f;");
  EXPECT_CONTAINS(src, "const long long v5 = (p1 + 0LL);");
  EXPECT_CONTAINS(src, "y[0 + p0 * 1500LL + p1 * 1LL] = (double)v7;");
  const std::string ints = ferry::kernels::fused_cuda_source("d=4 x0 i64:3 floordiv as:b8", {DType::i64},
                                                             DType::b8, "q");
  EXPECT_CONTAINS(ints, "fnp_floordiv(v0, v1)");
  EXPECT_CONTAINS(ints, "const bool v3 = (v2 != 0);");
  // A reduction folds into y with atomics (fused_cuda_test.cpp compiles every kind with NVRTC):
  // into one element, a block folds first and makes one atomic; into many, each thread makes its own.
  const std::string one = ferry::kernels::fused_cuda_source("d=4 y=0 f=add x0", {DType::f32}, DType::f32, "r");
  EXPECT_CONTAINS(one, "fnp_fold_block<0>(y, acc);");
  EXPECT_EQ(one.find("  fnp_fold<0>(y, acc);"), std::string::npos) << one;
  EXPECT_CONTAINS(ferry::kernels::fused_cuda_source("d=4,2 y=0,1 f=add x0", {DType::f32}, DType::f32, "r"),
                  "fnp_fold<0>(&y[");
  EXPECT_THROW(ferry::kernels::fused_cuda_source("d=4 x0 nope", {DType::f32}, DType::f32, "r"), ferry::UsageError);
}

}  // namespace
