// The fused elementwise kernel's program: a postfix expression over input
// tiles, constants and positions, read from one line of text so it travels
// as a kernel's text argument (docs/numpy.md describes the language). The
// same text drives the CPU interpreter (fused.cpp) and the CUDA source
// generator (fused_cuda.cpp), so both compute one expression.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/runtime/dtype.hpp"

namespace ferry::kernels::fused {

inline constexpr std::size_t max_inputs = 8;
inline constexpr std::size_t max_dims = 8;  // after merging: broadcasts alternating up to 8 times
inline constexpr std::size_t max_depth = 16;
inline constexpr std::size_t max_code = 256;

enum class Op : std::uint8_t {
  load, constant, index,  // push input k / a constant / the position along a dimension
  // binary, operands of one type
  add, sub, mul, div, floordiv, mod, pow, maximum, minimum, land, lor, lxor,
  shl, shr,                            // integers (not b8)
  atan2, copysign, hypot, logaddexp,   // f32/f64
  eq, ne, lt, le, gt, ge,  // -> u8 (bool)
  // unary
  neg, abs, square, sign, floor, ceil, trunc, round,
  // f32, f64, c64, c128 (sigmoid: not complex)
  exp, expm1, log, log1p, log2, log10, sqrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, asinh, acosh,
  atanh, sigmoid,
  lnot, isnan, isfinite, signbit,  // -> b8
  real, imag, conj,    // of c64/c128 (real, imag: -> f32/f64)
  cast,                // to Instr::type
  uniform, normal,     // i64 counter -> f64, seeded by Instr::imm
  where, clip,         // ternary
};

// How the result meets y: stored, or folded into it (y starts at the identity).
enum class Fold : std::uint8_t { none, add, mul, min, max };

struct Instr {
  Op op = Op::load;
  DType type = DType::f32;     // the result's element type
  DType operand = DType::f32;  // the operands' type (the condition of where aside)
  std::uint8_t arity = 0;
  std::int64_t imm = 0;        // load: input; index: dimension; uniform/normal: seed
  double value = 0;            // constant (integers exact up to 2^53; a complex one's real part)
  double imag = 0;             // a complex constant's imaginary part
  std::int64_t ivalue = 0;     // constant, exact for integer types
  std::size_t slot = 0;        // stack position of the result (operands follow it)
};

struct Program {
  std::vector<std::size_t> dims;                  // of the iteration, outermost first
  std::vector<std::int64_t> offsets;              // added to positions (a tile's place in its array)
  std::vector<std::vector<std::int64_t>> strides; // per input, in elements, per dimension
  std::vector<std::int64_t> y_strides;            // of y, in elements (0 along folded dimensions)
  Fold fold = Fold::none;
  std::vector<Instr> code;
  std::size_t depth = 0;                          // the stack's high-water mark
  DType result = DType::f32;                      // the value's type before it meets y

  std::size_t elements() const;
};

// Parses and type-checks `text` for inputs of the given element types.
// Throws UsageError naming the offending token.
Program parse(const std::string& text, const std::vector<DType>& inputs);

const char* op_name(Op op);

}  // namespace ferry::kernels::fused
