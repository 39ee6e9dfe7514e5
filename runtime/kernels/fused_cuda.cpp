// Generating CUDA source from a fused program: each stack slot becomes a
// local variable, each instruction one statement, with helpers giving the
// CPU interpreter's semantics (fused_ops.cpp): NumPy's floor division and
// modulo, NaN-propagating maximum/minimum, range-checked float-to-integer
// casts, and the same splitmix64 generators. A program that folds
// (f=add|mul|min|max) folds into y with atomics: where every element meets
// one y element (a whole reduction), each thread first folds its own
// elements and makes one atomic update; otherwise each element makes one.
// Atomics make the order of float sums vary from run to run, within the
// rounding of the accumulator type (float64 for float sums).
#include "fused_cuda.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "cpu/fused_program.hpp"
#include "ferry/error.hpp"

namespace ferry::kernels {
namespace {

using fused::Instr;
using fused::Op;

const char* ctype(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::u8: return "unsigned char";
    case DType::i8: return "signed char";
    case DType::i16: return "short";
    case DType::u16: return "unsigned short";
    case DType::u32: return "unsigned int";
    case DType::u64: return "unsigned long long";
    case DType::b8: return "bool";
    case DType::c64: return "fnp_c64";  // the prelude's {re, im} structs: std::complex's layout
    case DType::c128: return "fnp_c128";
  }
  return "?";
}

bool complex(DType t) { return t == DType::c64 || t == DType::c128; }
DType real_of(DType t) { return t == DType::c64 ? DType::f32 : t == DType::c128 ? DType::f64 : t; }

bool unsigned_int(DType t) { return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64; }

bool floating(DType t) { return t == DType::f32 || t == DType::f64; }

const char* const prelude = R"(
template <class T> __device__ inline bool fnp_nan(T v) { return v != v; }
template <class T> __device__ inline T fnp_max(T a, T b) { return fnp_nan(a) || fnp_nan(b) ? a + b : (a > b ? a : b); }
template <class T> __device__ inline T fnp_min(T a, T b) { return fnp_nan(a) || fnp_nan(b) ? a + b : (a < b ? a : b); }
template <class T> __device__ inline T fnp_floordiv_real(T a, T b) {
  if (b == 0) return a / b;
  T mod = fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  if (div == 0) return copysign(T(0), a / b);
  T q = floor(div);
  if (div - q > T(0.5)) q += T(1);
  return q;
}
__device__ inline float fnp_floordiv(float a, float b) { return fnp_floordiv_real(a, b); }
__device__ inline double fnp_floordiv(double a, double b) { return fnp_floordiv_real(a, b); }
template <class T> __device__ inline T fnp_floordiv(T a, T b) {
  if (b == 0) return 0;
  if (T(-1) < T(0) && b == T(-1)) return T(0) - a;
  T q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
__device__ inline float fnp_mod(float a, float b) {
  float r = fmodf(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r == 0 ? copysignf(0.0f, b) : r;
}
__device__ inline double fnp_mod(double a, double b) {
  double r = fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r == 0 ? copysign(0.0, b) : r;
}
template <class T> __device__ inline T fnp_mod(T a, T b) {
  if (b == 0 || (T(-1) < T(0) && b == T(-1))) return 0;
  T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
__device__ inline float fnp_pow(float a, float b) { return powf(a, b); }
__device__ inline double fnp_pow(double a, double b) { return pow(a, b); }
template <class T> __device__ inline T fnp_pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : a == T(-1) ? ((b % 2) ? T(-1) : T(1)) : T(0);
  unsigned long long r = 1, base = (unsigned long long)a;
  for (unsigned long long e = (unsigned long long)b; e != 0; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return (T)r;
}
template <class T> __device__ inline T fnp_sign(T a) { return fnp_nan(a) ? a : (T)((T(0) < a) - (a < T(0))); }
template <class T> __device__ inline T fnp_abs(T a) { return a < T(0) ? T(-a) : a; }
__device__ inline float fnp_abs(float a) { return fabsf(a); }  // abs(-0.0) is 0.0, as NumPy's
__device__ inline double fnp_abs(double a) { return fabs(a); }
template <class To, class From> __device__ inline To fnp_to_int(From v, double lo, double hi) {
  double d = (double)v;
  return d >= lo && d < hi ? (To)v : (To)lo;
}
__device__ inline unsigned long long fnp_mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
__device__ inline double fnp_uniform(unsigned long long seed, long long c) {
  return (double)(fnp_mix(fnp_mix(seed) ^ (unsigned long long)c) >> 11) * 0x1.0p-53;
}
__device__ inline double fnp_normal(unsigned long long seed, long long c) {
  double u1 = fnp_uniform(seed, 2 * c), u2 = fnp_uniform(seed, 2 * c + 1);
  return sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
}
// Complex numbers: explicit structs (std::complex's layout) with NumPy's
// product and quotient (its loops' formulas, as fused_ops.cpp), and the
// principal branches of the elementary functions.
template <class R> struct fnp_complex { R re, im; };
typedef fnp_complex<float> fnp_c64;
typedef fnp_complex<double> fnp_c128;
#define FNP_REAL1(name, f, d) \
  __device__ inline float fnp_r##name(float x) { return f(x); } \
  __device__ inline double fnp_r##name(double x) { return d(x); }
FNP_REAL1(exp, expf, exp)
FNP_REAL1(log, logf, log)
FNP_REAL1(sqrt, sqrtf, sqrt)
FNP_REAL1(sin, sinf, sin)
FNP_REAL1(cos, cosf, cos)
FNP_REAL1(sinh, sinhf, sinh)
FNP_REAL1(cosh, coshf, cosh)
FNP_REAL1(fabs, fabsf, fabs)
FNP_REAL1(rint, rintf, rint)
FNP_REAL1(expm1, expm1f, expm1)
__device__ inline float fnp_logaddexp(float a, float b) {
  if (a == b) return a + 0.693147180559945309f;
  const float d = a - b;
  if (d > 0) return a + log1pf(expf(-d));
  if (d <= 0) return b + log1pf(expf(d));
  return d;
}
__device__ inline double fnp_logaddexp(double a, double b) {
  if (a == b) return a + 0.693147180559945309;
  const double d = a - b;
  if (d > 0) return a + log1p(exp(-d));
  if (d <= 0) return b + log1p(exp(d));
  return d;
}
template <class T> __device__ inline T fnp_shl(T a, T b) {
  return (unsigned long long)b >= 8 * sizeof(T) ? T(0) : (T)(a << b);
}
template <class T> __device__ inline T fnp_shr(T a, T b) {
  return (unsigned long long)b >= 8 * sizeof(T) ? (a < T(0) ? T(-1) : T(0)) : (T)(a >> b);
}
template <class T> __device__ inline bool fnp_signbit(T a) { return a < T(0); }
__device__ inline bool fnp_signbit(float a) { return signbit(a); }
__device__ inline bool fnp_signbit(double a) { return signbit(a); }
__device__ inline float fnp_rhypot(float a, float b) { return hypotf(a, b); }
__device__ inline double fnp_rhypot(double a, double b) { return hypot(a, b); }
__device__ inline float fnp_ratan2(float a, float b) { return atan2f(a, b); }
__device__ inline double fnp_ratan2(double a, double b) { return atan2(a, b); }
__device__ inline float fnp_rcopysign(float a, float b) { return copysignf(a, b); }
__device__ inline double fnp_rcopysign(double a, double b) { return copysign(a, b); }
template <class R> __device__ inline fnp_complex<R> operator+(fnp_complex<R> a, fnp_complex<R> b) {
  return {a.re + b.re, a.im + b.im};
}
template <class R> __device__ inline fnp_complex<R> operator-(fnp_complex<R> a, fnp_complex<R> b) {
  return {a.re - b.re, a.im - b.im};
}
template <class R> __device__ inline fnp_complex<R> operator-(fnp_complex<R> a) { return {-a.re, -a.im}; }
template <class R> __device__ inline fnp_complex<R> operator*(fnp_complex<R> a, fnp_complex<R> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <class R> __device__ inline fnp_complex<R> operator/(fnp_complex<R> a, fnp_complex<R> b) {
  const R abs_br = fnp_rfabs(b.re), abs_bi = fnp_rfabs(b.im);
  if (abs_br >= abs_bi) {
    if (abs_br == 0 && abs_bi == 0) return {a.re / abs_br, a.im / abs_bi};
    const R rat = b.im / b.re, scl = R(1) / (b.re + b.im * rat);
    return {(a.re + a.im * rat) * scl, (a.im - a.re * rat) * scl};
  }
  const R rat = b.re / b.im, scl = R(1) / (b.im + b.re * rat);
  return {(a.re * rat + a.im) * scl, (a.im * rat - a.re) * scl};
}
template <class R> __device__ inline bool operator==(fnp_complex<R> a, fnp_complex<R> b) {
  return a.re == b.re && a.im == b.im;
}
template <class R> __device__ inline bool operator!=(fnp_complex<R> a, fnp_complex<R> b) { return !(a == b); }
template <class R> __device__ inline R fnp_abs(fnp_complex<R> a) { return fnp_rhypot(a.re, a.im); }
template <class R> __device__ inline fnp_complex<R> fnp_sign(fnp_complex<R> a) {
  if (a.re == 0 && a.im == 0) return {R(0), R(0)};
  const R m = fnp_rhypot(a.re, a.im);
  return {a.re / m, a.im / m};
}
template <class R> __device__ inline fnp_complex<R> fnp_cexp(fnp_complex<R> a) {
  const R e = fnp_rexp(a.re);
  return {e * fnp_rcos(a.im), e * fnp_rsin(a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_clog(fnp_complex<R> a) {
  return {fnp_rlog(fnp_rhypot(a.re, a.im)), fnp_ratan2(a.im, a.re)};
}
template <class R> __device__ inline fnp_complex<R> fnp_clog1p(fnp_complex<R> a) {
  return fnp_clog(fnp_complex<R>{R(1) + a.re, a.im});
}
template <class R> __device__ inline fnp_complex<R> fnp_csqrt(fnp_complex<R> a) {
  const R r = fnp_rhypot(a.re, a.im);
  if (r == 0) return {R(0), a.im};
  const R t = fnp_rsqrt((r + fnp_rfabs(a.re)) / R(2));
  if (a.re >= 0) return {t, a.im / (R(2) * t)};
  return {fnp_rfabs(a.im) / (R(2) * t), fnp_rcopysign(t, a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_csin(fnp_complex<R> a) {
  return {fnp_rsin(a.re) * fnp_rcosh(a.im), fnp_rcos(a.re) * fnp_rsinh(a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_ccos(fnp_complex<R> a) {
  return {fnp_rcos(a.re) * fnp_rcosh(a.im), -(fnp_rsin(a.re) * fnp_rsinh(a.im))};
}
template <class R> __device__ inline fnp_complex<R> fnp_ctanh(fnp_complex<R> a) {
  if (isinf(a.re) && isfinite(a.im)) return {fnp_rcopysign(R(1), a.re), fnp_rcopysign(R(0), a.im)};
  const R d = fnp_rcosh(R(2) * a.re) + fnp_rcos(R(2) * a.im);
  return {fnp_rsinh(R(2) * a.re) / d, fnp_rsin(R(2) * a.im) / d};
}
// The inverse and hyperbolic functions from exp, log and sqrt (principal
// branches; the CPU uses the C library's, which is more careful near the
// branch cuts and at infinities).
template <class R> __device__ inline fnp_complex<R> fnp_cexpm1(fnp_complex<R> a) {
  if (a.re == 0 && a.im == 0) return {R(0), a.im};  // the CPU's special cases (fused_ops.cpp)
  if (!isfinite(a.re) || !isfinite(a.im)) return fnp_cexp(a) - fnp_complex<R>{R(1), R(0)};
  const R h = fnp_rsin(a.im / R(2));
  return {fnp_rexpm1(a.re) * fnp_rcos(a.im) - R(2) * h * h, fnp_rexp(a.re) * fnp_rsin(a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_clog2(fnp_complex<R> a) {
  const fnp_complex<R> l = fnp_clog(a);
  return {l.re * R(1.4426950408889634), l.im * R(1.4426950408889634)};
}
template <class R> __device__ inline fnp_complex<R> fnp_clog10(fnp_complex<R> a) {
  const fnp_complex<R> l = fnp_clog(a);
  return {l.re * R(0.4342944819032518), l.im * R(0.4342944819032518)};
}
template <class R> __device__ inline fnp_complex<R> fnp_cround(fnp_complex<R> a) {
  return {fnp_rrint(a.re), fnp_rrint(a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_csinh(fnp_complex<R> a) {
  return {fnp_rsinh(a.re) * fnp_rcos(a.im), fnp_rcosh(a.re) * fnp_rsin(a.im)};
}
template <class R> __device__ inline fnp_complex<R> fnp_ccosh(fnp_complex<R> a) {
  return {fnp_rcosh(a.re) * fnp_rcos(a.im), fnp_rsinh(a.re) * fnp_rsin(a.im)};
}
// f(i z) / i or i f(z) shapes: i z = {-im, re}, -i w = {w.im, -w.re}.
template <class R> __device__ inline fnp_complex<R> fnp_times_i(fnp_complex<R> a) { return {-a.im, a.re}; }
template <class R> __device__ inline fnp_complex<R> fnp_over_i(fnp_complex<R> a) { return {a.im, -a.re}; }
template <class R> __device__ inline fnp_complex<R> fnp_ctan(fnp_complex<R> a) {
  return fnp_over_i(fnp_ctanh(fnp_times_i(a)));
}
template <class R> __device__ inline fnp_complex<R> fnp_casinh(fnp_complex<R> a) {
  return fnp_clog(a + fnp_csqrt(a * a + fnp_complex<R>{R(1), R(0)}));
}
template <class R> __device__ inline fnp_complex<R> fnp_cacosh(fnp_complex<R> a) {
  const fnp_complex<R> one{R(1), R(0)};
  return fnp_clog(a + fnp_csqrt(a + one) * fnp_csqrt(a - one));
}
template <class R> __device__ inline fnp_complex<R> fnp_catanh(fnp_complex<R> a) {
  const fnp_complex<R> one{R(1), R(0)};
  const fnp_complex<R> d = fnp_clog(one + a) - fnp_clog(one - a);
  return {d.re / R(2), d.im / R(2)};
}
template <class R> __device__ inline fnp_complex<R> fnp_casin(fnp_complex<R> a) {
  return fnp_over_i(fnp_casinh(fnp_times_i(a)));
}
template <class R> __device__ inline fnp_complex<R> fnp_catan(fnp_complex<R> a) {
  return fnp_over_i(fnp_catanh(fnp_times_i(a)));
}
template <class R> __device__ inline fnp_complex<R> fnp_cacos(fnp_complex<R> a) {
  const fnp_complex<R> s = fnp_casin(a);
  return {R(1.5707963267948966) - s.re, -s.im};
}
template <class R> __device__ inline fnp_complex<R> fnp_pow(fnp_complex<R> a, fnp_complex<R> b) {
  if (a.re == 0 && a.im == 0) return b.re == 0 && b.im == 0 ? fnp_complex<R>{R(1), R(0)} : a;
  return fnp_cexp(b * fnp_clog(a));
}
)";

// Folds (Op: 0 add, 1 mul, 2 min, 3 max) with the CPU's semantics: min and
// max propagate NaN. One compare-and-swap loop covers what CUDA has no
// atomic for (products, float min/max, bytes: the aligned word holding one).
const char* const fold_prelude = R"(
template <int Op, class T> __device__ inline T fnp_combine(T a, T b) {
  if constexpr (Op == 0) return (T)(a + b);
  else if constexpr (Op == 1) return (T)(a * b);
  else if constexpr (Op == 2) return fnp_min(a, b);
  else return fnp_max(a, b);
}
__device__ inline unsigned long long fnp_bits(double v) { return (unsigned long long)__double_as_longlong(v); }
__device__ inline unsigned long long fnp_bits(long long v) { return (unsigned long long)v; }
__device__ inline unsigned int fnp_bits(float v) { return (unsigned int)__float_as_int(v); }
__device__ inline unsigned int fnp_bits(int v) { return (unsigned int)v; }
__device__ inline unsigned long long fnp_bits(unsigned long long v) { return v; }
__device__ inline unsigned int fnp_bits(unsigned int v) { return v; }
__device__ inline void fnp_unbits(double& v, unsigned long long b) { v = __longlong_as_double((long long)b); }
__device__ inline void fnp_unbits(long long& v, unsigned long long b) { v = (long long)b; }
__device__ inline void fnp_unbits(float& v, unsigned int b) { v = __int_as_float((int)b); }
__device__ inline void fnp_unbits(int& v, unsigned int b) { v = (int)b; }
__device__ inline void fnp_unbits(unsigned long long& v, unsigned long long b) { v = b; }
__device__ inline void fnp_unbits(unsigned int& v, unsigned int b) { v = b; }
template <int Op, class T> __device__ inline void fnp_fold_cas(T* y, T v) {
  if constexpr (sizeof(T) == 8 || sizeof(T) == 4) {
    using Bits = decltype(fnp_bits(v));
    Bits* p = (Bits*)y;
    Bits old = *p, assumed;
    do {
      assumed = old;
      T cur;
      fnp_unbits(cur, assumed);
      old = atomicCAS(p, assumed, fnp_bits(fnp_combine<Op>(cur, v)));
    } while (old != assumed);
  } else {  // 1 or 2 bytes: the aligned word holding them
    unsigned int* p = (unsigned int*)((unsigned long long)y & ~3ULL);
    const unsigned int shift = (unsigned int)((unsigned long long)y & 3ULL) * 8u;
    const unsigned int mask = sizeof(T) == 1 ? 0xffu : 0xffffu;
    unsigned int old = *p, assumed;
    do {
      assumed = old;
      const T next = fnp_combine<Op>((T)((assumed >> shift) & mask), v);
      old = atomicCAS(p, assumed, (assumed & ~(mask << shift)) | (((unsigned int)next & mask) << shift));
    } while (old != assumed);
  }
}
template <int Op, class T> __device__ inline void fnp_fold(T* y, T v) { fnp_fold_cas<Op>(y, v); }
template <> __device__ inline void fnp_fold<0, float>(float* y, float v) { atomicAdd(y, v); }
template <> __device__ inline void fnp_fold<0, double>(double* y, double v) { atomicAdd(y, v); }
template <> __device__ inline void fnp_fold<0, int>(int* y, int v) { atomicAdd(y, v); }
template <> __device__ inline void fnp_fold<0, long long>(long long* y, long long v) {
  atomicAdd((unsigned long long*)y, (unsigned long long)v);
}
template <> __device__ inline void fnp_fold<2, int>(int* y, int v) { atomicMin(y, v); }
template <> __device__ inline void fnp_fold<3, int>(int* y, int v) { atomicMax(y, v); }
template <> __device__ inline void fnp_fold<2, long long>(long long* y, long long v) { atomicMin(y, v); }
template <> __device__ inline void fnp_fold<3, long long>(long long* y, long long v) { atomicMax(y, v); }
// Complex sums: one atomic per part. (Complex products have no atomic: refused.)
template <> __device__ inline void fnp_fold<0, fnp_c64>(fnp_c64* y, fnp_c64 v) {
  atomicAdd(&y->re, v.re);
  atomicAdd(&y->im, v.im);
}
template <> __device__ inline void fnp_fold<0, fnp_c128>(fnp_c128* y, fnp_c128 v) {
  atomicAdd(&y->re, v.re);
  atomicAdd(&y->im, v.im);
}
// Every thread's value into y[0], one atomic per block: each warp folds with
// shuffles, the warps' results meet in shared memory, and thread 0 folds the
// block's into y. All the block's threads must call it (a 1-D block of any size).
template <class T> __device__ inline T fnp_shfl_down(T v, unsigned mask, unsigned delta) {
  if constexpr (sizeof(T) < 4) return (T)__shfl_down_sync(mask, (int)v, delta);
  else return __shfl_down_sync(mask, v, delta);
}
template <class R> __device__ inline fnp_complex<R> fnp_shfl_down(fnp_complex<R> v, unsigned mask, unsigned delta) {
  return {__shfl_down_sync(mask, v.re, delta), __shfl_down_sync(mask, v.im, delta)};
}
template <int Op, class T> __device__ inline void fnp_fold_block(T* y, T acc) {
  __shared__ T fnp_warps[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned width = min(32u, blockDim.x - (warp << 5));  // the last warp may be partial
  const unsigned mask = width == 32u ? 0xffffffffu : (1u << width) - 1u;
  for (unsigned d = 16; d > 0; d >>= 1) {
    const T other = fnp_shfl_down(acc, mask, d);
    if (lane + d < width) acc = fnp_combine<Op>(acc, other);
  }
  if (lane == 0) fnp_warps[warp] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w) acc = fnp_combine<Op>(acc, fnp_warps[w]);
  fnp_fold<Op>(y, acc);
}
)";

int fold_code(fused::Fold f) {
  switch (f) {
    case fused::Fold::add: return 0;
    case fused::Fold::mul: return 1;
    case fused::Fold::min: return 2;
    case fused::Fold::max: return 3;
    case fused::Fold::none: break;
  }
  return -1;
}

// What y starts at, as the CPU kernel's fill_identity (bools: all starts
// true, any false).
std::string identity(fused::Fold f, DType t) {
  if (complex(t)) return fmt::format("{}{{{}, 0}}", ctype(t), f == fused::Fold::mul ? 1 : 0);
  if (f == fused::Fold::add) return "0";
  if (f == fused::Fold::mul) return "1";
  const bool min = f == fused::Fold::min;
  switch (t) {
    case DType::f32: return min ? "__int_as_float(0x7f800000)" : "(-__int_as_float(0x7f800000))";
    case DType::f64:
      return min ? "__longlong_as_double(0x7ff0000000000000LL)" : "(-__longlong_as_double(0x7ff0000000000000LL))";
    case DType::i32: return min ? "2147483647" : "(-2147483647 - 1)";
    case DType::i64: return min ? "9223372036854775807LL" : "(-9223372036854775807LL - 1)";
    case DType::u8: return min ? "255" : "0";
    case DType::i8: return min ? "127" : "(-128)";
    case DType::i16: return min ? "32767" : "(-32768)";
    case DType::u16: return min ? "65535" : "0";
    case DType::u32: return min ? "4294967295U" : "0U";
    case DType::u64: return min ? "18446744073709551615ULL" : "0ULL";
    case DType::b8: return min ? "true" : "false";
    case DType::c64:
    case DType::c128: break;
  }
  return "0";
}

std::string real_literal(double value, DType type) {
  const char* suffix = type == DType::f32 ? "f" : "";
  if (std::isnan(value)) return type == DType::f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(value)) {
    const std::string inf = type == DType::f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
    return value > 0 ? inf : "(-" + inf + ")";
  }
  return fmt::format("{:.17g}{}", value, suffix).find_first_of(".e") == std::string::npos
             ? fmt::format("{:.17g}.0{}", value, suffix)
             : fmt::format("{:.17g}{}", value, suffix);
}

std::string literal(const Instr& in) {
  switch (in.type) {
    case DType::f32:
    case DType::f64: return real_literal(in.value, in.type);
    case DType::i32: return fmt::format("{}", static_cast<std::int32_t>(in.ivalue));
    case DType::i64:
      // -2^63 has no literal of its own.
      return in.ivalue == INT64_MIN ? "(-9223372036854775807LL - 1)" : fmt::format("{}LL", in.ivalue);
    case DType::u8:
    case DType::i8:
    case DType::i16:
    case DType::u16: return fmt::format("({})({})", ctype(in.type), in.ivalue);
    case DType::u32: return fmt::format("{}U", static_cast<std::uint32_t>(in.ivalue));
    case DType::u64: return fmt::format("{}ULL", static_cast<std::uint64_t>(in.ivalue));
    case DType::b8: return in.ivalue != 0 ? "true" : "false";
    case DType::c64:
    case DType::c128:
      return fmt::format("{}{{{}, {}}}", ctype(in.type), real_literal(in.value, real_of(in.type)),
                         real_literal(in.imag, real_of(in.type)));
  }
  return "0";
}

std::string cast_expr(const std::string& v, DType from, DType to) {
  if (from == to) return v;
  if (complex(from)) {
    if (to == DType::b8) return fmt::format("({0}.re != 0 || {0}.im != 0)", v);
    if (complex(to)) return fmt::format("{0}{{({1}){2}.re, ({1}){2}.im}}", ctype(to), ctype(real_of(to)), v);
    return cast_expr(v + ".re", real_of(from), to);  // NumPy's: the imaginary part is dropped
  }
  if (complex(to)) return fmt::format("{}{{({}){}, 0}}", ctype(to), ctype(real_of(to)), cast_expr(v, from, real_of(to)));
  if (to == DType::b8) return fmt::format("({} != 0)", v);
  if (floating(from) && !floating(to)) {
    // As the CPU's convert: NaN and values outside [min, 2^digits) give min.
    const int bits = static_cast<int>(8 * size_of(to));
    const double lo = unsigned_int(to) ? 0.0 : -std::ldexp(1.0, bits - 1);
    const double hi = std::ldexp(1.0, unsigned_int(to) ? bits : bits - 1);
    return fmt::format("fnp_to_int<{}>({}, {:.1f}, {:.1f})", ctype(to), v, lo, hi);
  }
  return fmt::format("({}){}", ctype(to), v);
}

std::string unary(Op op, const std::string& a, DType t) {
  const bool f32 = t == DType::f32;
  const auto fn = [&](const char* name) {
    return complex(t) ? fmt::format("fnp_c{}({})", name, a) : fmt::format("{}{}({})", name, f32 ? "f" : "", a);
  };
  switch (op) {
    case Op::real: return fmt::format("{}.re", a);
    case Op::imag: return fmt::format("{}.im", a);
    case Op::conj: return fmt::format("{0}{{{1}.re, -{1}.im}}", ctype(t), a);
    case Op::neg: return fmt::format("({})(-{})", ctype(t), a);
    case Op::abs: return t == DType::b8 || unsigned_int(t) ? a : fmt::format("fnp_abs({})", a);
    case Op::square: return fmt::format("({})({} * {})", ctype(t), a, a);
    case Op::sign: return fmt::format("fnp_sign({})", a);
    case Op::floor: return floating(t) ? fn("floor") : a;
    case Op::ceil: return floating(t) ? fn("ceil") : a;
    case Op::trunc: return floating(t) ? fn("trunc") : a;
    case Op::round: return floating(t) ? fn("rint") : complex(t) ? fn("round") : a;  // rint: halves to even
    case Op::exp: return fn("exp");
    case Op::expm1: return fn("expm1");
    case Op::log: return fn("log");
    case Op::log1p: return fn("log1p");
    case Op::log2: return fn("log2");
    case Op::log10: return fn("log10");
    case Op::sqrt: return fn("sqrt");
    case Op::sin: return fn("sin");
    case Op::cos: return fn("cos");
    case Op::tan: return fn("tan");
    case Op::asin: return fn("asin");
    case Op::acos: return fn("acos");
    case Op::atan: return fn("atan");
    case Op::sinh: return fn("sinh");
    case Op::cosh: return fn("cosh");
    case Op::tanh: return fn("tanh");
    case Op::asinh: return fn("asinh");
    case Op::acosh: return fn("acosh");
    case Op::atanh: return fn("atanh");
    case Op::signbit: return t == DType::b8 || unsigned_int(t) ? "false" : fmt::format("fnp_signbit({})", a);
    case Op::sigmoid: return fmt::format("({0})1 / (({0})1 + {1})", ctype(t), unary(Op::exp, "(-" + a + ")", t));
    case Op::lnot: return fmt::format("(!{})", a);
    case Op::isnan: return floating(t) || complex(t) ? fmt::format("fnp_nan({})", a) : "false";
    case Op::isfinite:
      if (complex(t)) return fmt::format("((bool)isfinite({0}.re) && (bool)isfinite({0}.im))", a);
      return floating(t) ? fmt::format("(bool)isfinite({})", a) : "true";
    default: break;
  }
  throw Error(fmt::format("fused CUDA source: {} is not unary", fused::op_name(op)));
}

std::string binary(Op op, const std::string& a, const std::string& b, DType t) {
  const char* c = ctype(t);
  switch (op) {
    case Op::add: return fmt::format("({})({} + {})", c, a, b);
    case Op::sub: return fmt::format("({})({} - {})", c, a, b);
    case Op::mul: return fmt::format("({})({} * {})", c, a, b);
    case Op::div: return fmt::format("({} / {})", a, b);
    case Op::floordiv: return fmt::format("fnp_floordiv({}, {})", a, b);
    case Op::mod: return fmt::format("fnp_mod({}, {})", a, b);
    case Op::pow: return fmt::format("fnp_pow({}, {})", a, b);
    case Op::maximum: return fmt::format("fnp_max({}, {})", a, b);
    case Op::minimum: return fmt::format("fnp_min({}, {})", a, b);
    case Op::land: return fmt::format("({})({} & {})", c, a, b);
    case Op::lor: return fmt::format("({})({} | {})", c, a, b);
    case Op::lxor: return fmt::format("({})({} ^ {})", c, a, b);
    case Op::shl: return fmt::format("fnp_shl({}, {})", a, b);
    case Op::shr: return fmt::format("fnp_shr({}, {})", a, b);
    case Op::atan2: return fmt::format("fnp_ratan2({}, {})", a, b);
    case Op::copysign: return fmt::format("fnp_rcopysign({}, {})", a, b);
    case Op::hypot: return fmt::format("fnp_rhypot({}, {})", a, b);
    case Op::logaddexp: return fmt::format("fnp_logaddexp({}, {})", a, b);
    case Op::eq: return fmt::format("({} == {})", a, b);
    case Op::ne: return fmt::format("({} != {})", a, b);
    case Op::lt: return fmt::format("({} < {})", a, b);
    case Op::le: return fmt::format("({} <= {})", a, b);
    case Op::gt: return fmt::format("({} > {})", a, b);
    case Op::ge: return fmt::format("({} >= {})", a, b);
    default: break;
  }
  throw Error(fmt::format("fused CUDA source: {} is not binary", fused::op_name(op)));
}

}  // namespace

std::string fused_cuda_source(const std::string& program, const std::vector<DType>& inputs, DType y,
                              const std::string& entry) {
  const fused::Program p = fused::parse(program, inputs);
  const std::size_t rank = p.dims.size();
  std::string params = fmt::format("long long n, {}* __restrict__ y", ctype(y));
  for (std::size_t k = 0; k < inputs.size(); ++k)
    params += fmt::format(", const {}* __restrict__ x{}", ctype(inputs[k]), k);

  std::string body;
  // The position along each dimension, from the flat index of y's element.
  body += "    long long r = e;\n";
  for (std::size_t d = rank; d-- > 0;) {
    if (d > 0) body += fmt::format("    const long long p{0} = r % {1}LL; r /= {1}LL;\n", d, p.dims[d]);
    else body += "    const long long p0 = r;\n";
  }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::string offset = "0";
    for (std::size_t d = 0; d < rank; ++d) {
      if (p.strides[k][d] != 0) offset += fmt::format(" + p{} * {}LL", d, p.strides[k][d]);
    }
    body += fmt::format("    const long long o{} = {};\n", k, offset);
  }
  std::string ypos = "0";
  for (std::size_t d = 0; d < rank; ++d) {
    if (p.y_strides[d] != 0) ypos += fmt::format(" + p{} * {}LL", d, p.y_strides[d]);
  }

  // Slot s of the stack at instruction i is variable v<i>; track which.
  std::vector<std::string> stack;
  std::vector<DType> types;
  for (std::size_t i = 0; i < p.code.size(); ++i) {
    const Instr& in = p.code[i];
    const std::string v = fmt::format("v{}", i);
    std::vector<std::string> ops(stack.end() - in.arity, stack.end());
    const std::vector<DType> op_types(types.end() - in.arity, types.end());
    stack.resize(stack.size() - in.arity);
    types.resize(types.size() - in.arity);
    std::string expr;
    switch (in.op) {
      case Op::load: expr = fmt::format("x{0}[o{0}]", in.imm); break;
      case Op::constant: expr = literal(in); break;
      case Op::index: expr = fmt::format("(p{} + {}LL)", in.imm, p.offsets[static_cast<std::size_t>(in.imm)]); break;
      case Op::cast: expr = cast_expr(ops[0], op_types[0], in.type); break;
      case Op::uniform:
      case Op::normal:
        expr = fmt::format("fnp_{}({}ULL, {})", in.op == Op::uniform ? "uniform" : "normal",
                           static_cast<std::uint64_t>(in.imm), ops[0]);
        break;
      case Op::where: expr = fmt::format("({} ? {} : {})", ops[0], ops[1], ops[2]); break;
      case Op::clip: expr = fmt::format("fnp_min(fnp_max({}, {}), {})", ops[0], ops[1], ops[2]); break;
      default:
        expr = in.arity == 1 ? unary(in.op, ops[0], in.operand) : binary(in.op, ops[0], ops[1], in.operand);
    }
    body += fmt::format("    const {} {} = {};\n", ctype(in.type), v, expr);
    stack.push_back(v);
    types.push_back(in.type);
  }
  const std::string value = cast_expr(stack.back(), types.back(), y);
  const std::string loop =
      "  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;\n"
      "       e += (long long)gridDim.x * blockDim.x) {\n";
  if (p.fold == fused::Fold::none) {
    body += fmt::format("    y[{}] = {};\n", ypos, value);
    return fmt::format("// ferry.numpy fused program: {}\n{}\nextern \"C\" __global__ void {}({}) {{\n{}{}  }}\n}}\n",
                       program, prelude, entry, params, loop, body);
  }
  const int op = fold_code(p.fold);
  if (complex(y) && p.fold != fused::Fold::add)
    throw UsageError("fused CUDA source: a complex y folds only with f=add (products have no CUDA atomic; "
                     "run them on the CPU)");
  const char* yt = ctype(y);
  const std::string start = identity(p.fold, y);
  std::string kernel;
  if (ypos == "0") {  // one y element: fold locally, then across the block, then one atomic per block
    body += fmt::format("    acc = fnp_combine<{}>(acc, ({}){});\n", op, yt, value);
    kernel = fmt::format("  {0} acc = {1};\n{2}{3}  }}\n  fnp_fold_block<{4}>(y, acc);\n", yt, start, loop, body, op);
  } else {
    body += fmt::format("    fnp_fold<{}>(&y[{}], ({}){});\n", op, ypos, yt, value);
    kernel = loop + body + "  }\n";
  }
  // The entry folds into y, which must hold the identity first: the second
  // entry, `<entry>_identity(n, y)`, fills it (launched before, on the same y).
  return fmt::format(
      "// ferry.numpy fused program: {0}\n{1}\n{2}\n"
      "extern \"C\" __global__ void {3}_identity(long long n, {4}* __restrict__ y) {{\n"
      "{5}    y[e] = {6};\n  }}\n}}\n"
      "extern \"C\" __global__ void {3}({7}) {{\n{8}}}\n",
      program, prelude, fold_prelude, entry, yt, loop, start, params, kernel);
}

}  // namespace ferry::kernels
