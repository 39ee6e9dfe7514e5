// Elementwise kernels on CPU: fill, copy, map (y = f(x)) and the sum reduction.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "cpu/support.hpp"
#include "map_op.hpp"

namespace ferry::kernels {
namespace {

constexpr std::array<std::pair<std::string_view, MapOp>, 10> map_ops{{{"copy", MapOp::copy},
                                                                     {"neg", MapOp::neg},
                                                                     {"abs", MapOp::abs},
                                                                     {"sqrt", MapOp::sqrt},
                                                                     {"exp", MapOp::exp},
                                                                     {"log", MapOp::log},
                                                                     {"square", MapOp::square},
                                                                     {"relu", MapOp::relu},
                                                                     {"sigmoid", MapOp::sigmoid},
                                                                     {"scale", MapOp::scale}}};

template <typename T, typename F>
void transform(const BufferArg& x, const BufferArg& y, F f) {
  const Stretches s = stretches({&x, &y});
  for (std::size_t r = 0; r < s.count; ++r) {
    const T* in = row<T>(x, r);
    T* out = row<T>(y, r);
    for (std::size_t i = 0; i < s.length; ++i) out[i] = f(in[i]);
  }
}

template <typename T>
void apply(MapOp op, T alpha, const BufferArg& x, const BufferArg& y) {
  switch (op) {
    case MapOp::copy: return transform<T>(x, y, [](T v) { return v; });
    case MapOp::neg: return transform<T>(x, y, [](T v) { return -v; });
    case MapOp::abs: return transform<T>(x, y, [](T v) { return std::abs(v); });
    case MapOp::sqrt: return transform<T>(x, y, [](T v) { return std::sqrt(v); });
    case MapOp::exp: return transform<T>(x, y, [](T v) { return std::exp(v); });
    case MapOp::log: return transform<T>(x, y, [](T v) { return std::log(v); });
    case MapOp::square: return transform<T>(x, y, [](T v) { return v * v; });
    case MapOp::relu: return transform<T>(x, y, [](T v) { return v > T(0) ? v : T(0); });
    case MapOp::sigmoid: return transform<T>(x, y, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case MapOp::scale: return transform<T>(x, y, [alpha](T v) { return alpha * v; });
  }
}

// An integer buffer filled with 2.5 or 1e30 would silently hold something else.
void validate_fill(const KernelArgs& args) {
  const BufferArg& x = args.buffer(0);
  const double value = args.real(1);
  dispatch_numeric(x.dtype, "fill", [&]<typename T>(std::type_identity<T>) {
    if constexpr (std::is_integral_v<T>) {
      // The upper bound is the power of two just past max, which a double holds exactly.
      const bool fits = std::trunc(value) == value && value >= static_cast<double>(std::numeric_limits<T>::min()) &&
                        value < std::ldexp(1.0, std::numeric_limits<T>::digits);
      if (!fits) {
        throw UsageError(fmt::format("value {} cannot be stored in x, whose element type is {}", value,
                                     to_string(x.dtype)));
      }
    }
  });
}

KernelDef make_fill() {
  KernelDef k;
  k.name = "fill";
  k.summary = "x[i] = value";
  k.params = {buffer_param("x", AccessMode::write, numeric), real_param("value")};
  k.validate = validate_fill;
  k.cost = [](const KernelArgs& args) { return Cost{0, total_bytes(args, 1)}; };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const double value = ctx.args.real(1);
    dispatch_numeric(x.dtype, "fill", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x});
      for (std::size_t r = 0; r < s.count; ++r) std::fill_n(row<T>(x, r), s.length, static_cast<T>(value));
    });
  };
  k.chunkable = true;
  return k;
}

KernelDef make_copy() {
  KernelDef k;
  k.name = "copy";
  k.summary = "y = x";
  k.params = {buffer_param("x", AccessMode::read, numeric), buffer_param("y", AccessMode::write, numeric)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"x", "y"});
    require_same_shape(args.buffer(0), "x", args.buffer(1), "y");
  };
  k.cost = [](const KernelArgs& args) { return Cost{0, total_bytes(args, 2)}; };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const BufferArg& y = ctx.args.buffer(1);
    const std::size_t element = size_of(x.dtype);
    const Stretches s = stretches({&x, &y});
    for (std::size_t r = 0; r < s.count; ++r) {
      std::memcpy(static_cast<char*>(y.data) + r * y.ld * element, static_cast<const char*>(x.data) + r * x.ld * element,
                  s.length * element);
    }
  };
  k.chunkable = true;
  return k;
}

KernelDef make_map() {
  KernelDef k;
  k.name = "map";
  k.summary = "y = op(x) elementwise; op is copy, neg, abs, sqrt, exp, log, square, relu, sigmoid or scale (alpha * x)";
  k.params = {buffer_param("x", AccessMode::read, floating), buffer_param("y", AccessMode::write, floating),
              text_param("op"), real_param("alpha", 1.0)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"x", "y"});
    require_same_shape(args.buffer(0), "x", args.buffer(1), "y");
    parse_map_op(args.text(2));
  };
  k.cost = [](const KernelArgs& args) {
    return Cost{static_cast<double>(args.buffer(0).elements()), total_bytes(args, 2)};
  };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    const BufferArg& y = ctx.args.buffer(1);
    const MapOp op = parse_map_op(ctx.args.text(2));
    const double alpha = ctx.args.real(3);
    dispatch_floating(x.dtype, "map",
                      [&]<typename T>(std::type_identity<T>) { apply<T>(op, static_cast<T>(alpha), x, y); });
  };
  k.chunkable = true;
  return k;
}

KernelDef make_sum() {
  KernelDef k;
  k.name = "sum";
  k.summary = "sum of the elements of x, accumulated in double";
  k.params = {buffer_param("x", AccessMode::read, numeric)};
  k.cost = [](const KernelArgs& args) {
    return Cost{static_cast<double>(args.buffer(0).elements()), total_bytes(args, 1)};
  };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& x = ctx.args.buffer(0);
    ctx.result = dispatch_numeric(x.dtype, "sum", [&]<typename T>(std::type_identity<T>) {
      const Stretches s = stretches({&x});
      double total = 0;
      for (std::size_t r = 0; r < s.count; ++r) {
        const T* in = row<T>(x, r);
        for (std::size_t i = 0; i < s.length; ++i) total += static_cast<double>(in[i]);
      }
      return total;
    });
  };
  k.returns_scalar = true;
  return k;
}

}  // namespace

MapOp parse_map_op(const std::string& name) {
  for (const auto& [text, op] : map_ops) {
    if (text == name) return op;
  }
  std::string valid;
  for (const auto& entry : map_ops) valid += (valid.empty() ? "" : ", ") + std::string(entry.first);
  throw UsageError(fmt::format("op '{}' is unknown; map knows {}", name, valid));
}


void register_elementwise_kernels(KernelRegistry& registry) {
  registry.add(make_fill());
  registry.add(make_copy());
  registry.add(make_map());
  registry.add(make_sum());
}

}  // namespace ferry::kernels
