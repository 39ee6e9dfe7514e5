// The fused kernel's block loops, NumPy's semantics for each operation:
// floor division and modulo round toward minus infinity, integer division
// by zero gives 0, maximum/minimum propagate NaN, float-to-integer casts of
// NaN or out-of-range values give the type's minimum.
#include "fused_ops.hpp"

#include <fmt/format.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>

#include "ferry/error.hpp"

namespace ferry::kernels::fused {
namespace {

template <typename T>
constexpr bool is_float = std::is_floating_point_v<T>;
template <typename T>
constexpr bool is_bool = std::is_same_v<T, bool>;
template <typename T>
constexpr bool is_signed_int = std::is_signed_v<T> && !is_float<T>;
template <typename T>
struct complex_trait : std::false_type {};
template <typename R>
struct complex_trait<std::complex<R>> : std::true_type {};
template <typename T>
constexpr bool is_complex = complex_trait<T>::value;
// The real type of T: R for std::complex<R>, T itself otherwise.
template <typename T>
struct real_trait { using type = T; };
template <typename R>
struct real_trait<std::complex<R>> { using type = R; };
template <typename T>
using real_t = typename real_trait<T>::type;

// ---- elementwise functors ----

// On bools (b8, C++'s bool) add is or and mul is and, as in NumPy.
struct Add {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_bool<T>) return a || b;
    else return static_cast<T>(a + b);
  }
};
struct Sub { template <class T> T operator()(T a, T b) const { return static_cast<T>(a - b); } };
// Complex products and quotients as NumPy computes them (its loops, not
// C's Annex G): the same roundings, so the same bits.
struct Mul {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_bool<T>) return a && b;
    else if constexpr (is_complex<T>)
      return T(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
    else return static_cast<T>(a * b);
  }
};
struct Div {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_complex<T>) {
      using R = real_t<T>;
      const R ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
      const R abs_br = std::fabs(br), abs_bi = std::fabs(bi);
      if (abs_br >= abs_bi) {
        if (abs_br == 0 && abs_bi == 0) return T(ar / abs_br, ai / abs_bi);
        const R rat = bi / br, scl = R(1) / (br + bi * rat);
        return T((ar + ai * rat) * scl, (ai - ar * rat) * scl);
      }
      const R rat = br / bi, scl = R(1) / (bi + br * rat);
      return T((ar * rat + ai) * scl, (ai * rat - ar) * scl);
    } else {
      return a / b;
    }
  }
};
struct FloorDiv {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      // NumPy's npy_divmod: floor(a / b) would give 10 for 1.0 // 0.1, not 9.
      if (b == 0) return a / b;
      T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != 0) {
        if ((b < 0) != (mod < 0)) div -= T(1);
      }
      if (div == 0) return std::copysign(T(0), a / b);
      T q = std::floor(div);
      if (div - q > T(0.5)) q += T(1);
      return q;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return static_cast<T>(0u - static_cast<std::make_unsigned_t<T>>(a));  // no overflow trap
        T q = static_cast<T>(a / b);
        if (static_cast<T>(a % b) != 0 && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return static_cast<T>(a / b);
      }
    }
  }
};
struct Mod {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      T r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r == 0 ? std::copysign(T(0), b) : r;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;
        T r = static_cast<T>(a % b);
        if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
        return r;
      } else {
        return static_cast<T>(a % b);
      }
    }
  }
};
struct Pow {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_float<T> || is_complex<T>) {
      return std::pow(a, b);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) return a == 1 ? T(1) : a == -1 ? (b % 2 ? T(-1) : T(1)) : T(0);
      }
      using U = std::make_unsigned_t<T>;  // wraps like NumPy instead of overflowing
      U result = 1, base = static_cast<U>(a);
      for (auto e = static_cast<std::uint64_t>(b); e != 0; e >>= 1) {
        if (e & 1) result = static_cast<U>(result * base);
        base = static_cast<U>(base * base);
      }
      return static_cast<T>(result);
    }
  }
};
struct Maximum {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      if (std::isnan(a) || std::isnan(b)) return a + b;
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      if (std::isnan(a) || std::isnan(b)) return a + b;
    }
    return a < b ? a : b;
  }
};
struct And { template <class T> T operator()(T a, T b) const { return static_cast<T>(a & b); } };
struct Or { template <class T> T operator()(T a, T b) const { return static_cast<T>(a | b); } };
struct Xor { template <class T> T operator()(T a, T b) const { return static_cast<T>(a ^ b); } };
// NumPy's shifts: a count past the type's width gives 0 (or -1 for a
// negative value shifted right), never C++'s undefined behaviour.
struct Shl {
  template <class T>
  T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    if (static_cast<std::uint64_t>(b) >= 8 * sizeof(T)) return 0;
    return static_cast<T>(static_cast<U>(a) << b);
  }
};
struct Shr {
  template <class T>
  T operator()(T a, T b) const {
    if (static_cast<std::uint64_t>(b) >= 8 * sizeof(T)) {
      if constexpr (std::is_signed_v<T>) return a < T(0) ? T(-1) : T(0);
      else return T(0);
    }
    return static_cast<T>(a >> b);
  }
};
struct Atan2 { template <class T> T operator()(T a, T b) const { return std::atan2(a, b); } };
struct Copysign { template <class T> T operator()(T a, T b) const { return std::copysign(a, b); } };
struct Hypot { template <class T> T operator()(T a, T b) const { return std::hypot(a, b); } };
// NumPy's npy_logaddexp: exact at equal arguments (infinities included).
struct Logaddexp {
  template <class T>
  T operator()(T a, T b) const {
    if (a == b) return a + std::numbers::ln2_v<T>;
    const T d = a - b;
    if (d > 0) return a + std::log1p(std::exp(-d));
    if (d <= 0) return b + std::log1p(std::exp(d));
    return d;  // NaN
  }
};
struct Eq { template <class T> bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> bool operator()(T a, T b) const { return a >= b; } };

// Integer negation wraps (-INT_MIN is INT_MIN, as in NumPy) instead of overflowing.
struct Neg {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_signed_int<T>) return static_cast<T>(0u - static_cast<std::make_unsigned_t<T>>(a));
    else return static_cast<T>(-a);
  }
};
struct Abs {
  template <class T>
  real_t<T> operator()(T a) const {
    if constexpr (is_float<T>) return std::fabs(a);  // abs(-0.0) is 0.0, as NumPy's
    else if constexpr (is_complex<T>) return std::hypot(a.real(), a.imag());
    else if constexpr (std::is_unsigned_v<T>) return a;
    else return a < 0 ? Neg{}(a) : a;
  }
};
struct Square {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) return Mul{}(a, a);
    else return static_cast<T>(a * a);
  }
};
struct Sign {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_float<T>) {
      if (std::isnan(a)) return a;
    }
    if constexpr (is_complex<T>) {  // NumPy 2's and the array API's: z / |z|, 0 at 0
      if (a == T(0)) return T(0);  // +0 + 0j for every signed zero, as NumPy
      const auto m = std::hypot(a.real(), a.imag());
      return T(a.real() / m, a.imag() / m);
    } else if constexpr (std::is_unsigned_v<T>) return static_cast<T>(a != 0);
    else return static_cast<T>((T(0) < a) - (a < T(0)));
  }
};
struct Floor {
  template <class T> T operator()(T a) const { if constexpr (is_float<T>) return std::floor(a); else return a; }
};
struct Ceil {
  template <class T> T operator()(T a) const { if constexpr (is_float<T>) return std::ceil(a); else return a; }
};
struct Trunc {
  template <class T> T operator()(T a) const { if constexpr (is_float<T>) return std::trunc(a); else return a; }
};
// Halves to even, as NumPy's round (rint in the default rounding mode);
// a complex number rounds each part.
struct Round {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_float<T>) return std::nearbyint(a);
    else if constexpr (is_complex<T>) return T(std::nearbyint(a.real()), std::nearbyint(a.imag()));
    else return a;
  }
};
struct Exp { template <class T> T operator()(T a) const { return std::exp(a); } };
// Complex: NumPy's nc_expm1 (accurate near 0, where exp(z) - 1 cancels),
// with the array API's special cases where it differs: a zero gives +0
// (not -0), infinities and NaNs what exp(z) - 1 gives (C's cexp follows
// the standard there; NumPy's formula gives NaN for inf + 0j).
struct Expm1 {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) {
      using R = real_t<T>;
      if (a.real() == 0 && a.imag() == 0) return T(R(0), a.imag());
      if (!std::isfinite(a.real()) || !std::isfinite(a.imag())) return std::exp(a) - T(1);
      const auto h = std::sin(a.imag() / 2);
      return T(std::expm1(a.real()) * std::cos(a.imag()) - 2 * h * h, std::exp(a.real()) * std::sin(a.imag()));
    } else {
      return std::expm1(a);
    }
  }
};
struct Log { template <class T> T operator()(T a) const { return std::log(a); } };
// Complex: NumPy's, log(z) scaled (C++ has no complex log2).
struct Log2 {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) return std::log(a) * real_t<T>(std::numbers::log2e);
    else return std::log2(a);
  }
};
struct Log10 {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) return std::log(a) * real_t<T>(std::numbers::log10e);
    else return std::log10(a);
  }
};
struct Log1p {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) return std::log(T(1) + a);
    else return std::log1p(a);
  }
};
struct Sqrt { template <class T> T operator()(T a) const { return std::sqrt(a); } };
struct Sin { template <class T> T operator()(T a) const { return std::sin(a); } };
struct Cos { template <class T> T operator()(T a) const { return std::cos(a); } };
struct Tan { template <class T> T operator()(T a) const { return std::tan(a); } };
struct Asin { template <class T> T operator()(T a) const { return std::asin(a); } };
struct Acos { template <class T> T operator()(T a) const { return std::acos(a); } };
struct Atan { template <class T> T operator()(T a) const { return std::atan(a); } };
struct Sinh { template <class T> T operator()(T a) const { return std::sinh(a); } };
struct Cosh { template <class T> T operator()(T a) const { return std::cosh(a); } };
// Complex: the array API's 1 + 0j at +infinity + finite i (C's ctanh, and
// NumPy, give the zero the sign of sin(2 y)).
struct Tanh {
  template <class T>
  T operator()(T a) const {
    if constexpr (is_complex<T>) {
      if (std::isinf(a.real()) && std::isfinite(a.imag()))
        return T(std::copysign(real_t<T>(1), a.real()), std::copysign(real_t<T>(0), a.imag()));
    }
    return std::tanh(a);
  }
};
struct Asinh { template <class T> T operator()(T a) const { return std::asinh(a); } };
struct Acosh { template <class T> T operator()(T a) const { return std::acosh(a); } };
struct Atanh { template <class T> T operator()(T a) const { return std::atanh(a); } };
struct Sigmoid { template <class T> T operator()(T a) const { return T(1) / (T(1) + std::exp(-a)); } };
struct Not { template <class T> bool operator()(T a) const { return a == T(0); } };
struct IsNan {
  template <class T>
  bool operator()(T a) const {
    if constexpr (is_float<T>) return std::isnan(a);
    else if constexpr (is_complex<T>) return std::isnan(a.real()) || std::isnan(a.imag());
    else return false;
  }
};
struct IsFinite {
  template <class T>
  bool operator()(T a) const {
    if constexpr (is_float<T>) return std::isfinite(a);
    else if constexpr (is_complex<T>) return std::isfinite(a.real()) && std::isfinite(a.imag());
    else return true;
  }
};
struct Signbit {
  template <class T>
  bool operator()(T a) const {
    if constexpr (is_float<T>) return std::signbit(a);
    else if constexpr (std::is_signed_v<T>) return a < T(0);
    else return false;
  }
};
struct Real { template <class T> real_t<T> operator()(T a) const { return a.real(); } };
struct Imag { template <class T> real_t<T> operator()(T a) const { return a.imag(); } };
struct Conj { template <class T> T operator()(T a) const { return std::conj(a); } };

// ---- block loops ----

template <class T, class R, class F>
void unary(void* out, const void* const* in, std::size_t n, const Instr&) {
  R* __restrict o = static_cast<R*>(out);
  const T* a = static_cast<const T*>(in[0]);
  for (std::size_t i = 0; i < n; ++i) o[i] = F{}(a[i]);
}

template <class T, class R, class F>
void binary(void* out, const void* const* in, std::size_t n, const Instr&) {
  R* o = static_cast<R*>(out);
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  for (std::size_t i = 0; i < n; ++i) o[i] = F{}(a[i], b[i]);
}

template <class T>
void where(void* out, const void* const* in, std::size_t n, const Instr&) {
  T* o = static_cast<T*>(out);
  const auto* c = static_cast<const bool*>(in[0]);
  const T* a = static_cast<const T*>(in[1]);
  const T* b = static_cast<const T*>(in[2]);
  for (std::size_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
}

template <class T>
void clip(void* out, const void* const* in, std::size_t n, const Instr&) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(in[0]);
  const T* lo = static_cast<const T*>(in[1]);
  const T* hi = static_cast<const T*>(in[2]);
  for (std::size_t i = 0; i < n; ++i) o[i] = Minimum{}(Maximum{}(x[i], lo[i]), hi[i]);
}

template <class From, class To>
To convert(From v) {
  if constexpr (is_bool<To>) {
    return v != From(0);
  } else if constexpr (is_complex<From> && is_complex<To>) {
    return static_cast<To>(v);
  } else if constexpr (is_complex<From>) {  // NumPy's: the imaginary part is dropped
    return convert<real_t<From>, To>(v.real());
  } else if constexpr (is_complex<To>) {
    return To(static_cast<real_t<To>>(v), real_t<To>(0));
  } else if constexpr (is_float<From> && !is_float<To>) {
    // 2^(digits) is exact in any float; NaN fails both comparisons.
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    const double hi = std::ldexp(1.0, std::numeric_limits<To>::digits);
    const auto d = static_cast<double>(v);
    return d >= lo && d < hi ? static_cast<To>(v) : std::numeric_limits<To>::min();
  } else {
    return static_cast<To>(v);
  }
}

template <class From, class To>
void cast(void* out, const void* const* in, std::size_t n, const Instr&) {
  To* o = static_cast<To*>(out);
  const From* a = static_cast<const From*>(in[0]);
  if constexpr (std::is_same_v<From, To>) {
    std::memcpy(o, a, n * sizeof(To));
  } else {
    for (std::size_t i = 0; i < n; ++i) o[i] = convert<From, To>(a[i]);
  }
}

template <bool Normal>
void generate(void* out, const void* const* in, std::size_t n, const Instr& instr) {
  double* o = static_cast<double*>(out);
  const auto* c = static_cast<const std::int64_t*>(in[0]);
  const auto seed = static_cast<std::uint64_t>(instr.imm);
  for (std::size_t i = 0; i < n; ++i) o[i] = Normal ? normal(seed, c[i]) : uniform(seed, c[i]);
}

// fn(std::type_identity<T>) for the C++ type T of t; a value-initialised
// result (nullptr: no loop) for the types the interpreter does not compute.
template <typename Fn>
auto with_type(DType t, Fn&& fn) -> decltype(fn(std::type_identity<float>{})) {
  switch (t) {
    case DType::f32: return fn(std::type_identity<float>{});
    case DType::f64: return fn(std::type_identity<double>{});
    case DType::i32: return fn(std::type_identity<std::int32_t>{});
    case DType::i64: return fn(std::type_identity<std::int64_t>{});
    case DType::u8: return fn(std::type_identity<std::uint8_t>{});
    case DType::i8: return fn(std::type_identity<std::int8_t>{});
    case DType::i16: return fn(std::type_identity<std::int16_t>{});
    case DType::u16: return fn(std::type_identity<std::uint16_t>{});
    case DType::u32: return fn(std::type_identity<std::uint32_t>{});
    case DType::u64: return fn(std::type_identity<std::uint64_t>{});
    case DType::b8: return fn(std::type_identity<bool>{});
    case DType::c64: return fn(std::type_identity<std::complex<float>>{});
    case DType::c128: return fn(std::type_identity<std::complex<double>>{});
  }
  return {};
}

template <typename Fn>
OpFn any_type(DType t, Fn&& fn) {
  return with_type(t, std::forward<Fn>(fn));
}

// Bools take only the operations NumPy defines on them.
template <class F>
constexpr bool bool_ok = false;
template <> constexpr bool bool_ok<Add> = true;
template <> constexpr bool bool_ok<Mul> = true;
template <> constexpr bool bool_ok<Maximum> = true;
template <> constexpr bool bool_ok<Minimum> = true;
template <> constexpr bool bool_ok<And> = true;
template <> constexpr bool bool_ok<Or> = true;
template <> constexpr bool bool_ok<Xor> = true;
template <> constexpr bool bool_ok<Abs> = true;
// Complex numbers take what the array API defines on them.
template <class F>
constexpr bool complex_ok = false;
template <> constexpr bool complex_ok<Add> = true;
template <> constexpr bool complex_ok<Sub> = true;
template <> constexpr bool complex_ok<Mul> = true;
template <> constexpr bool complex_ok<Div> = true;
template <> constexpr bool complex_ok<Pow> = true;
template <> constexpr bool complex_ok<Eq> = true;
template <> constexpr bool complex_ok<Ne> = true;
template <> constexpr bool complex_ok<Neg> = true;
template <> constexpr bool complex_ok<Abs> = true;
template <> constexpr bool complex_ok<Square> = true;
template <> constexpr bool complex_ok<Sign> = true;
template <> constexpr bool complex_ok<Round> = true;
template <> constexpr bool complex_ok<Exp> = true;
template <> constexpr bool complex_ok<Expm1> = true;
template <> constexpr bool complex_ok<Log> = true;
template <> constexpr bool complex_ok<Log1p> = true;
template <> constexpr bool complex_ok<Log2> = true;
template <> constexpr bool complex_ok<Log10> = true;
template <> constexpr bool complex_ok<Sqrt> = true;
template <> constexpr bool complex_ok<Sin> = true;
template <> constexpr bool complex_ok<Cos> = true;
template <> constexpr bool complex_ok<Tan> = true;
template <> constexpr bool complex_ok<Asin> = true;
template <> constexpr bool complex_ok<Acos> = true;
template <> constexpr bool complex_ok<Atan> = true;
template <> constexpr bool complex_ok<Sinh> = true;
template <> constexpr bool complex_ok<Cosh> = true;
template <> constexpr bool complex_ok<Tanh> = true;
template <> constexpr bool complex_ok<Asinh> = true;
template <> constexpr bool complex_ok<Acosh> = true;
template <> constexpr bool complex_ok<Atanh> = true;
template <> constexpr bool complex_ok<IsNan> = true;
template <> constexpr bool complex_ok<IsFinite> = true;
template <class F, class T>
constexpr bool takes = (!is_bool<T> || bool_ok<F>) && (!is_complex<T> || complex_ok<F>);

template <class F>
OpFn same(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (!takes<F, T>) return nullptr;
    else return &binary<T, T, F>;
  });
}
template <class F>
OpFn integral_only(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_float<T> || is_complex<T>) return nullptr;
    else return &binary<T, T, F>;
  });
}
template <class F>
OpFn integer_only(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_float<T> || is_complex<T> || is_bool<T>) return nullptr;
    else return &binary<T, T, F>;
  });
}
template <class F>
OpFn floating_only(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_float<T>) return &binary<T, T, F>;
    else return nullptr;
  });
}
template <class F>
OpFn compare(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_complex<T> && !complex_ok<F>) return nullptr;  // bools compare as 0 < 1
    else return &binary<T, bool, F>;
  });
}
// R: the result's type from the operand's (T itself, or its real type).
template <class F, template <class> class R = std::type_identity_t>
OpFn map(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (!takes<F, T>) return nullptr;
    else return &unary<T, R<T>, F>;
  });
}
template <class F>
OpFn floating_map(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_float<T> || (is_complex<T> && complex_ok<F>)) return &unary<T, T, F>;
    else return nullptr;
  });
}
template <class F>
OpFn complex_map(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_complex<T>) return &unary<T, std::conditional_t<std::is_same_v<F, Conj>, T, real_t<T>>, F>;
    else return nullptr;
  });
}
template <class F>
OpFn test(DType t) {
  return any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
    if constexpr (is_complex<T> && !complex_ok<F>) return nullptr;
    else return &unary<T, bool, F>;
  });
}

template <class T, Fold F>
T combine(T a, T b) {
  if constexpr (F == Fold::add) return Add{}(a, b);
  else if constexpr (F == Fold::mul) return Mul{}(a, b);
  else if constexpr (F == Fold::min) return Minimum{}(a, b);
  else return Maximum{}(a, b);
}

template <class T, Fold F>
void fold_each(void* y, const void* v, std::size_t n) {
  T* o = static_cast<T*>(y);
  const T* a = static_cast<const T*>(v);
  for (std::size_t i = 0; i < n; ++i) o[i] = combine<T, F>(o[i], a[i]);
}

// Eight partial results keep the loop vectorisable and, for sums, the
// rounding error closer to NumPy's pairwise summation than one accumulator.
template <class T, Fold F>
void fold_one(void* y, const void* v, std::size_t n) {
  const T* a = static_cast<const T*>(v);
  if (n == 0) return;
  T acc = a[0];
  std::size_t i = 1;
  if (n >= 16) {
    T part[8];
    for (std::size_t j = 0; j < 8; ++j) part[j] = a[j];
    for (i = 8; i + 8 <= n; i += 8) {
      for (std::size_t j = 0; j < 8; ++j) part[j] = combine<T, F>(part[j], a[i + j]);
    }
    acc = part[0];
    for (std::size_t j = 1; j < 8; ++j) acc = combine<T, F>(acc, part[j]);
  }
  for (; i < n; ++i) acc = combine<T, F>(acc, a[i]);
  T* o = static_cast<T*>(y);
  *o = combine<T, F>(*o, acc);
}

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

double uniform(std::uint64_t seed, std::int64_t counter) {
  const std::uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(counter));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

double normal(std::uint64_t seed, std::int64_t counter) {
  const double u1 = uniform(seed, 2 * counter), u2 = uniform(seed, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

OpFn resolve(const Instr& instr) {
  const DType t = instr.operand;
  OpFn fn = nullptr;
  switch (instr.op) {
    case Op::add: fn = same<Add>(t); break;
    case Op::sub: fn = same<Sub>(t); break;
    case Op::mul: fn = same<Mul>(t); break;
    case Op::div: fn = same<Div>(t); break;
    case Op::floordiv: fn = same<FloorDiv>(t); break;
    case Op::mod: fn = same<Mod>(t); break;
    case Op::pow: fn = same<Pow>(t); break;
    case Op::maximum: fn = same<Maximum>(t); break;
    case Op::minimum: fn = same<Minimum>(t); break;
    case Op::land: fn = integral_only<And>(t); break;
    case Op::lor: fn = integral_only<Or>(t); break;
    case Op::lxor: fn = integral_only<Xor>(t); break;
    case Op::shl: fn = integer_only<Shl>(t); break;
    case Op::shr: fn = integer_only<Shr>(t); break;
    case Op::atan2: fn = floating_only<Atan2>(t); break;
    case Op::copysign: fn = floating_only<Copysign>(t); break;
    case Op::hypot: fn = floating_only<Hypot>(t); break;
    case Op::logaddexp: fn = floating_only<Logaddexp>(t); break;
    case Op::eq: fn = compare<Eq>(t); break;
    case Op::ne: fn = compare<Ne>(t); break;
    case Op::lt: fn = compare<Lt>(t); break;
    case Op::le: fn = compare<Le>(t); break;
    case Op::gt: fn = compare<Gt>(t); break;
    case Op::ge: fn = compare<Ge>(t); break;
    case Op::neg: fn = map<Neg>(t); break;
    case Op::abs: fn = map<Abs, real_t>(t); break;
    case Op::square: fn = map<Square>(t); break;
    case Op::sign: fn = map<Sign>(t); break;
    case Op::floor: fn = map<Floor>(t); break;
    case Op::ceil: fn = map<Ceil>(t); break;
    case Op::trunc: fn = map<Trunc>(t); break;
    case Op::round: fn = map<Round>(t); break;
    case Op::exp: fn = floating_map<Exp>(t); break;
    case Op::expm1: fn = floating_map<Expm1>(t); break;
    case Op::log: fn = floating_map<Log>(t); break;
    case Op::log1p: fn = floating_map<Log1p>(t); break;
    case Op::log2: fn = floating_map<Log2>(t); break;
    case Op::log10: fn = floating_map<Log10>(t); break;
    case Op::sqrt: fn = floating_map<Sqrt>(t); break;
    case Op::sin: fn = floating_map<Sin>(t); break;
    case Op::cos: fn = floating_map<Cos>(t); break;
    case Op::tan: fn = floating_map<Tan>(t); break;
    case Op::asin: fn = floating_map<Asin>(t); break;
    case Op::acos: fn = floating_map<Acos>(t); break;
    case Op::atan: fn = floating_map<Atan>(t); break;
    case Op::sinh: fn = floating_map<Sinh>(t); break;
    case Op::cosh: fn = floating_map<Cosh>(t); break;
    case Op::tanh: fn = floating_map<Tanh>(t); break;
    case Op::asinh: fn = floating_map<Asinh>(t); break;
    case Op::acosh: fn = floating_map<Acosh>(t); break;
    case Op::atanh: fn = floating_map<Atanh>(t); break;
    case Op::sigmoid: fn = floating_map<Sigmoid>(t); break;
    case Op::lnot: fn = test<Not>(t); break;
    case Op::isnan: fn = test<IsNan>(t); break;
    case Op::isfinite: fn = test<IsFinite>(t); break;
    case Op::signbit: fn = test<Signbit>(t); break;
    case Op::real: fn = complex_map<Real>(t); break;
    case Op::imag: fn = complex_map<Imag>(t); break;
    case Op::conj: fn = complex_map<Conj>(t); break;
    case Op::cast: fn = cast_fn(t, instr.type); break;
    case Op::uniform: fn = &generate<false>; break;
    case Op::normal: fn = &generate<true>; break;
    case Op::where: fn = any_type(t, []<class T>(std::type_identity<T>) -> OpFn { return &where<T>; }); break;
    case Op::clip:
      fn = any_type(t, []<class T>(std::type_identity<T>) -> OpFn {
        if constexpr (is_complex<T>) return nullptr;
        else return &clip<T>;
      });
      break;
    case Op::load:
    case Op::constant:
    case Op::index: break;
  }
  if (fn == nullptr) throw Error(fmt::format("fused: no loop for {} on {}", op_name(instr.op), to_string(t)));
  return fn;
}

OpFn cast_fn(DType from, DType to) {
  return any_type(from, [to]<class F>(std::type_identity<F>) -> OpFn {
    return any_type(to, []<class T>(std::type_identity<T>) -> OpFn { return &cast<F, T>; });
  });
}

FoldFn fold_fn(Fold fold, DType type, bool into_one) {
  const auto pick = [&]<class T>(std::type_identity<T>) -> FoldFn {
    if constexpr (is_complex<T>) {  // complex numbers have no order: sums and products only
      if (fold == Fold::add) return into_one ? &fold_one<T, Fold::add> : &fold_each<T, Fold::add>;
      if (fold == Fold::mul) return into_one ? &fold_one<T, Fold::mul> : &fold_each<T, Fold::mul>;
    } else {
      switch (fold) {
        case Fold::add: return into_one ? &fold_one<T, Fold::add> : &fold_each<T, Fold::add>;
        case Fold::mul: return into_one ? &fold_one<T, Fold::mul> : &fold_each<T, Fold::mul>;
        case Fold::min: return into_one ? &fold_one<T, Fold::min> : &fold_each<T, Fold::min>;
        case Fold::max: return into_one ? &fold_one<T, Fold::max> : &fold_each<T, Fold::max>;
        case Fold::none: break;
      }
    }
    return nullptr;
  };
  return with_type(type, pick);
}

void fill_identity(Fold fold, DType type, void* y, std::size_t n) {
  const auto fill = [&]<class T>(std::type_identity<T>) {
    T value{};
    if (fold == Fold::mul) value = T(1);
    if constexpr (is_complex<T>) {
      // fold_fn has no min or max for complex numbers
    } else if (fold == Fold::min || fold == Fold::max) {
      // bool's max is true: all() starts true, any() false.
      if constexpr (is_float<T>) value = fold == Fold::min ? std::numeric_limits<T>::infinity()
                                                            : -std::numeric_limits<T>::infinity();
      else value = fold == Fold::min ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
    }
    T* o = static_cast<T*>(y);
    for (std::size_t i = 0; i < n; ++i) o[i] = value;
    return 0;
  };
  with_type(type, fill);
}

}  // namespace ferry::kernels::fused
