// Helpers shared by the built-in CPU kernels: parameter builders, dtype
// dispatch, shape checks and the row-by-row walk over strided views.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels {

inline const std::vector<DType> floating{DType::f32, DType::f64};
inline const std::vector<DType> numeric{DType::f32, DType::f64, DType::i32, DType::i64, DType::u8};

inline Param buffer_param(std::string name, AccessMode mode, std::vector<DType> dtypes) {
  return Param{std::move(name), ParamKind::buffer, mode, std::move(dtypes), std::nullopt};
}
inline Param real_param(std::string name, std::optional<double> default_value = std::nullopt) {
  Param p{std::move(name), ParamKind::real, AccessMode::read, {}, std::nullopt};
  if (default_value) p.default_value = *default_value;
  return p;
}
inline Param integer_param(std::string name, std::optional<std::int64_t> default_value = std::nullopt) {
  Param p{std::move(name), ParamKind::integer, AccessMode::read, {}, std::nullopt};
  if (default_value) p.default_value = *default_value;
  return p;
}
inline Param text_param(std::string name) {
  return Param{std::move(name), ParamKind::text, AccessMode::read, {}, std::nullopt};
}

// Calls fn(std::type_identity<T>{}) with T the C++ type of `type`. The
// parameter list has already restricted the types, so another one is a bug.
template <typename Fn>
decltype(auto) dispatch_floating(DType type, const char* kernel, Fn&& fn) {
  switch (type) {
    case DType::f32: return fn(std::type_identity<float>{});
    case DType::f64: return fn(std::type_identity<double>{});
    default: break;
  }
  throw Error(fmt::format("{}: no CPU implementation for element type {}", kernel, to_string(type)));
}

template <typename Fn>
decltype(auto) dispatch_numeric(DType type, const char* kernel, Fn&& fn) {
  switch (type) {
    case DType::i32: return fn(std::type_identity<std::int32_t>{});
    case DType::i64: return fn(std::type_identity<std::int64_t>{});
    case DType::u8: return fn(std::type_identity<std::uint8_t>{});
    default: return dispatch_floating(type, kernel, std::forward<Fn>(fn));
  }
}

inline std::string shape(const BufferArg& b) { return fmt::format("{} x {}", b.rows, b.cols); }

// The buffers are the leading arguments, named in parameter order.
inline void require_one_dtype(const KernelArgs& args, std::initializer_list<const char*> names) {
  const DType first = args.buffer(0).dtype;
  std::size_t i = 0;
  for (const char* name : names) {
    if (args.buffer(i).dtype != first) {
      throw UsageError(fmt::format("{} has element type {} but {} has {}; the buffers of one call share an element type",
                                   name, to_string(args.buffer(i).dtype), *names.begin(), to_string(first)));
    }
    ++i;
  }
}

inline void require_same_shape(const BufferArg& a, const char* a_name, const BufferArg& b, const char* b_name) {
  if (a.rows != b.rows || a.cols != b.cols) {
    throw UsageError(fmt::format("{} is {} but {} is {}; they must have the same shape", b_name, shape(b), a_name,
                                 shape(a)));
  }
}

inline void require_square(const BufferArg& a, const char* name) {
  if (a.rows != a.cols) throw UsageError(fmt::format("{} is {}; it must be square", name, shape(a)));
}

// OpenBLAS is built with 32-bit integers; larger extents would wrap silently.
inline int blas_int(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("extent {} exceeds what the BLAS interface can address", n));
  }
  return static_cast<int>(n);
}

// BLAS wants ld >= max(1, cols) even where a single row makes it meaningless.
inline int leading_dim(const BufferArg& b) {
  return blas_int(b.rows <= 1 ? std::max<std::size_t>(b.cols, 1) : std::max(b.ld, std::max<std::size_t>(b.cols, 1)));
}

inline double total_bytes(const KernelArgs& args, std::size_t buffers) {
  double bytes = 0;
  for (std::size_t i = 0; i < buffers; ++i) bytes += static_cast<double>(args.buffer(i).bytes());
  return bytes;
}

// Views may be tiles of a bigger matrix (ld > cols). When every buffer is
// contiguous the whole call is one stretch, so BLAS-1 sees one long vector;
// otherwise it is walked row by row.
struct Stretches {
  std::size_t count = 0;   // stretches to visit
  std::size_t length = 0;  // elements in each
};

inline Stretches stretches(std::initializer_list<const BufferArg*> buffers) {
  const BufferArg& first = **buffers.begin();
  if (first.elements() == 0) return {};
  const bool contiguous = std::all_of(buffers.begin(), buffers.end(), [](const BufferArg* b) { return b->contiguous(); });
  if (contiguous) return {1, first.elements()};
  return {first.rows, first.cols};
}

template <typename T>
T* row(const BufferArg& b, std::size_t r) {
  return b.as<T>() + r * b.ld;
}

// gemm's parameters (cpu/gemm.cpp declares them) as both its variants read them.
namespace gemm_param {
inline constexpr std::size_t a = 0, b = 1, c = 2, alpha = 3, beta = 4, trans_a = 5, trans_b = 6;
}
struct GemmCall {
  const BufferArg& a;
  const BufferArg& b;
  const BufferArg& c;
  double alpha, beta;
  bool trans_a, trans_b;
  std::size_t k;  // the inner dimension of op(a) * op(b)
};
inline GemmCall gemm_call(const KernelArgs& args) {
  const BufferArg& a = args.buffer(gemm_param::a);
  const bool trans_a = args.integer(gemm_param::trans_a) == 1;
  return GemmCall{a, args.buffer(gemm_param::b), args.buffer(gemm_param::c), args.real(gemm_param::alpha),
                  args.real(gemm_param::beta), trans_a, args.integer(gemm_param::trans_b) == 1,
                  trans_a ? a.rows : a.cols};
}

void register_blas1_kernels(KernelRegistry& registry);
void register_gemm_kernels(KernelRegistry& registry);
void register_cholesky_kernels(KernelRegistry& registry);
void register_elementwise_kernels(KernelRegistry& registry);
void register_fused_kernels(KernelRegistry& registry);

}  // namespace ferry::kernels
