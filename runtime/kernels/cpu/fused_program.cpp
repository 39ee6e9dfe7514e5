// Reading a fused program: header fields, then the postfix code, each token
// type-checked against the stack so the interpreter never meets a surprise.
#include "fused_program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string_view>
#include <utility>

#include "ferry/error.hpp"

namespace ferry::kernels::fused {
namespace {

struct Spelling {
  std::string_view text;
  Op op;
  std::uint8_t arity;
};

constexpr std::array<Spelling, 64> spellings{{
    {"add", Op::add, 2},         {"sub", Op::sub, 2},        {"mul", Op::mul, 2},       {"div", Op::div, 2},
    {"floordiv", Op::floordiv, 2}, {"mod", Op::mod, 2},      {"pow", Op::pow, 2},       {"maximum", Op::maximum, 2},
    {"minimum", Op::minimum, 2}, {"and", Op::land, 2},       {"or", Op::lor, 2},        {"xor", Op::lxor, 2},
    {"shl", Op::shl, 2},         {"shr", Op::shr, 2},        {"atan2", Op::atan2, 2},   {"copysign", Op::copysign, 2},
    {"hypot", Op::hypot, 2},     {"logaddexp", Op::logaddexp, 2},
    {"eq", Op::eq, 2},           {"ne", Op::ne, 2},          {"lt", Op::lt, 2},         {"le", Op::le, 2},
    {"gt", Op::gt, 2},           {"ge", Op::ge, 2},          {"neg", Op::neg, 1},       {"abs", Op::abs, 1},
    {"square", Op::square, 1},   {"sign", Op::sign, 1},      {"floor", Op::floor, 1},   {"ceil", Op::ceil, 1},
    {"trunc", Op::trunc, 1},     {"round", Op::round, 1},
    {"exp", Op::exp, 1},         {"expm1", Op::expm1, 1},    {"log", Op::log, 1},       {"log1p", Op::log1p, 1},
    {"log2", Op::log2, 1},       {"log10", Op::log10, 1},    {"sqrt", Op::sqrt, 1},
    {"sin", Op::sin, 1},         {"cos", Op::cos, 1},        {"tan", Op::tan, 1},       {"asin", Op::asin, 1},
    {"acos", Op::acos, 1},       {"atan", Op::atan, 1},      {"sinh", Op::sinh, 1},     {"cosh", Op::cosh, 1},
    {"tanh", Op::tanh, 1},       {"asinh", Op::asinh, 1},    {"acosh", Op::acosh, 1},   {"atanh", Op::atanh, 1},
    {"sigmoid", Op::sigmoid, 1},
    {"not", Op::lnot, 1},        {"isnan", Op::isnan, 1},    {"isfinite", Op::isfinite, 1}, {"signbit", Op::signbit, 1},
    {"real", Op::real, 1},       {"imag", Op::imag, 1},      {"conj", Op::conj, 1},
    {"where", Op::where, 3},     {"clip", Op::clip, 3},      {"load", Op::load, 0},     {"const", Op::constant, 0},
    {"index", Op::index, 0},
}};

bool floating(DType t) { return t == DType::f32 || t == DType::f64; }

const char* type_code(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::u16: return "u16";
    case DType::u32: return "u32";
    case DType::u64: return "u64";
    case DType::b8: return "b8";
    case DType::c64: return "c64";
    case DType::c128: return "c128";
  }
  return "?";
}

bool complex(DType t) { return t == DType::c64 || t == DType::c128; }
DType real_of(DType t) { return t == DType::c64 ? DType::f32 : t == DType::c128 ? DType::f64 : t; }

DType dtype_named(std::string_view name, std::string_view token) {
  for (DType t : all_dtypes) {
    if (name == type_code(t)) return t;
  }
  throw UsageError(fmt::format(
      "fused program: '{}' names no element type (f32, f64, c64, c128, i8, i16, i32, i64, u8, u16, u32, u64, b8)",
      token));
}

template <typename N>
N number(std::string_view text, std::string_view token) {
  N value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw UsageError(fmt::format("fused program: '{}' is not a number where one is expected", token));
  }
  return value;
}

template <typename N>
std::vector<N> numbers(std::string_view list, std::string_view token) {
  std::vector<N> out;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    out.push_back(number<N>(list.substr(0, comma), token));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<std::int64_t> natural_strides(const std::vector<std::size_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<std::int64_t>(dims[i]);
  return s;
}

class Reader {
 public:
  Reader(Program& p, const std::vector<DType>& inputs) : p_(p), inputs_(inputs) {}

  void header(std::string_view token) {
    const std::size_t eq = token.find('=');
    const std::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == "d") {
      dims_given_ = true;
      p_.dims = numbers<std::size_t>(value, token);
      if (p_.dims.empty() || p_.dims.size() > max_dims)
        throw UsageError(fmt::format("fused program: '{}' gives {} dimensions; 1 to {} are allowed", token,
                                     p_.dims.size(), max_dims));
    } else if (key == "o") {
      p_.offsets = numbers<std::int64_t>(value, token);
    } else if (key == "y") {
      p_.y_strides = numbers<std::int64_t>(value, token);
    } else if (key == "f") {
      if (value == "add") p_.fold = Fold::add;
      else if (value == "mul") p_.fold = Fold::mul;
      else if (value == "min") p_.fold = Fold::min;
      else if (value == "max") p_.fold = Fold::max;
      else throw UsageError(fmt::format("fused program: '{}': y folds with add, mul, min or max", token));
    } else if (key.size() > 1 && key[0] == 's') {
      const auto k = number<std::size_t>(key.substr(1), token);
      if (k >= inputs_.size()) throw UsageError(fmt::format("fused program: '{}' names input {} of {}", token, k,
                                                            inputs_.size()));
      p_.strides.resize(inputs_.size());
      p_.strides[k] = numbers<std::int64_t>(value, token);
    } else {
      throw UsageError(fmt::format("fused program: '{}' is no header field (d, o, s<k>, y, f)", token));
    }
  }

  void code(std::string_view token) {
    if (!dims_given_) throw UsageError("fused program: the dimensions (d=...) must come before the code");
    if (p_.code.size() >= max_code)
      throw UsageError(fmt::format("fused program: more than {} instructions", max_code));
    Instr in;
    const std::size_t colon = token.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view head = token.substr(0, colon), tail = token.substr(colon + 1);
      if (head == "as") {
        in.op = Op::cast;
        in.arity = 1;
        in.type = dtype_named(tail, token);
      } else if (head == "uniform" || head == "normal") {
        in.op = head == "uniform" ? Op::uniform : Op::normal;
        in.arity = 1;
        in.imm = static_cast<std::int64_t>(number<std::uint64_t>(tail, token));
      } else {
        in.op = Op::constant;
        in.type = dtype_named(head, token);
        const auto real = [&](std::string_view part) {
          return part == "nan" ? NAN : part == "inf" ? INFINITY : part == "-inf" ? -INFINITY : number<double>(part, token);
        };
        if (floating(in.type)) {
          in.value = real(tail);
        } else if (complex(in.type)) {  // c64:<real>,<imag>
          const std::size_t comma = tail.find(',');
          if (comma == std::string_view::npos)
            throw UsageError(fmt::format("fused program: '{}' needs <real>,<imag>", token));
          in.value = real(tail.substr(0, comma));
          in.imag = real(tail.substr(comma + 1));
        } else {
          // u64 constants past 2^63 keep their bits in ivalue.
          in.ivalue = in.type == DType::u64 ? static_cast<std::int64_t>(number<std::uint64_t>(tail, token))
                                            : number<std::int64_t>(tail, token);
          in.value = in.type == DType::u64 ? static_cast<double>(static_cast<std::uint64_t>(in.ivalue))
                                           : static_cast<double>(in.ivalue);
        }
      }
    } else if (token.size() > 1 && (token[0] == 'x' || token[0] == 'i') &&
               token.find_first_not_of("0123456789", 1) == std::string_view::npos) {
      in.op = token[0] == 'x' ? Op::load : Op::index;
      in.imm = number<std::int64_t>(token.substr(1), token);
      if (in.op == Op::load) {
        if (static_cast<std::size_t>(in.imm) >= inputs_.size())
          throw UsageError(fmt::format("fused program: '{}' loads input {} but there are {}", token, in.imm,
                                       inputs_.size()));
        in.type = inputs_[static_cast<std::size_t>(in.imm)];
      } else {
        if (static_cast<std::size_t>(in.imm) >= p_.dims.size())
          throw UsageError(fmt::format("fused program: '{}' indexes dimension {} of {}", token, in.imm,
                                       p_.dims.size()));
        in.type = DType::i64;
      }
    } else {
      const Spelling* s = nullptr;
      for (const Spelling& sp : spellings) {
        if (sp.text == token && sp.arity > 0) s = &sp;
      }
      if (s == nullptr) throw UsageError(fmt::format("fused program: '{}' is no instruction", token));
      in.op = s->op;
      in.arity = s->arity;
    }
    push(in, token);
  }

  void finish() {
    if (!dims_given_) throw UsageError("fused program: no dimensions (d=...)");
    if (stack_.size() != 1)
      throw UsageError(fmt::format("fused program: leaves {} values on the stack; it must leave one", stack_.size()));
    p_.result = stack_.back();
    const std::size_t rank = p_.dims.size();
    if (p_.offsets.empty()) p_.offsets.assign(rank, 0);
    p_.strides.resize(inputs_.size());
    for (auto& s : p_.strides) {
      if (s.empty()) s = natural_strides(p_.dims);
    }
    if (p_.y_strides.empty()) p_.y_strides = natural_strides(p_.dims);
    const auto rank_check = [&](std::size_t got, const char* what) {
      if (got != rank)
        throw UsageError(fmt::format("fused program: {} has {} entries for {} dimensions", what, got, rank));
    };
    rank_check(p_.offsets.size(), "o=");
    rank_check(p_.y_strides.size(), "y=");
    for (const auto& s : p_.strides) rank_check(s.size(), "an input's strides (s<k>=)");
    // The interpreter walks the innermost dimension in blocks: contiguous or
    // broadcast (stride 1 or 0) there.
    for (const auto& s : p_.strides) {
      if (s.back() != 0 && s.back() != 1)
        throw UsageError("fused program: an input's innermost stride must be 0 or 1");
    }
    if (p_.y_strides.back() != 0 && p_.y_strides.back() != 1)
      throw UsageError("fused program: y's innermost stride must be 0 or 1");
    const bool folds = std::find(p_.y_strides.begin(), p_.y_strides.end(), 0) != p_.y_strides.end();
    if (folds && p_.fold == Fold::none)
      throw UsageError("fused program: y has a zero stride but no fold (f=add, mul, min or max) says how to combine");
  }

 private:
  void push(Instr& in, std::string_view token) {
    if (stack_.size() < in.arity)
      throw UsageError(fmt::format("fused program: '{}' needs {} operands but the stack holds {}", token, in.arity,
                                   stack_.size()));
    const DType* ops = stack_.data() + stack_.size() - in.arity;
    const auto fail = [&](const char* why) {
      std::string types;
      for (std::size_t i = 0; i < in.arity; ++i) types += (i ? ", " : "") + std::string(to_string(ops[i]));
      throw UsageError(fmt::format("fused program: '{}' {} (operands {})", token, why, types));
    };
    switch (in.arity) {
      case 0: break;
      case 1: {
        in.operand = ops[0];
        const Op op = in.op;
        if (op == Op::cast) break;
        if (op == Op::uniform || op == Op::normal) {
          if (ops[0] != DType::i64) fail("takes an i64 counter");
          in.type = DType::f64;
        } else if (op == Op::isnan || op == Op::isfinite) {
          in.type = DType::b8;
        } else if (op == Op::signbit) {
          if (complex(ops[0])) fail("does not take complex numbers");
          in.type = DType::b8;
        } else if (op == Op::real || op == Op::imag || op == Op::conj) {
          if (!complex(ops[0])) fail("takes c64 or c128");
          in.type = op == Op::conj ? ops[0] : real_of(ops[0]);
        } else if (complex(ops[0]) &&
                   (op == Op::floor || op == Op::ceil || op == Op::trunc || op == Op::sigmoid || op == Op::lnot)) {
          fail("does not take complex numbers");
        } else if (op == Op::abs) {
          in.type = real_of(ops[0]);
        } else if (op == Op::lnot) {
          if (ops[0] != DType::b8) fail("takes a b8 (bool)");
          in.type = DType::b8;
        } else if (op >= Op::exp && op <= Op::sigmoid) {
          if (!floating(ops[0]) && !complex(ops[0])) fail("takes f32, f64, c64 or c128");
          in.type = ops[0];
        } else {
          if (ops[0] == DType::b8) fail("does not take b8 (bool)");
          in.type = ops[0];
        }
        break;
      }
      case 2: {
        if (ops[0] != ops[1]) fail("needs operands of one element type");
        in.operand = ops[0];
        if (in.op == Op::div && !floating(ops[0]) && !complex(ops[0])) fail("takes f32, f64, c64 or c128");
        const bool logical = in.op == Op::land || in.op == Op::lor || in.op == Op::lxor;
        if (logical && floating(ops[0])) fail("takes integers or b8 (bool)");
        if ((in.op == Op::shl || in.op == Op::shr) && floating(ops[0])) fail("takes integers");
        if (in.op >= Op::atan2 && in.op <= Op::logaddexp && !floating(ops[0])) fail("takes f32 or f64");
        const bool on_bool = logical || in.op == Op::add || in.op == Op::mul || in.op == Op::maximum ||
                             in.op == Op::minimum || (in.op >= Op::eq && in.op <= Op::ge);
        if (ops[0] == DType::b8 && !on_bool) fail("does not take b8 (bool)");
        const bool on_complex = in.op == Op::add || in.op == Op::sub || in.op == Op::mul || in.op == Op::div ||
                                in.op == Op::pow || in.op == Op::eq || in.op == Op::ne;
        if (complex(ops[0]) && !on_complex) fail("does not take complex numbers");
        in.type = in.op >= Op::eq && in.op <= Op::ge ? DType::b8 : ops[0];
        break;
      }
      case 3: {
        if (in.op == Op::where) {
          if (ops[0] != DType::b8) fail("takes a b8 (bool) condition first");
          if (ops[1] != ops[2]) fail("needs its two choices of one element type");
          in.operand = ops[1];
        } else {
          if (ops[0] != ops[1] || ops[1] != ops[2]) fail("needs operands of one element type");
          if (complex(ops[0])) fail("does not take complex numbers");
          in.operand = ops[0];
        }
        in.type = in.operand;
        break;
      }
    }
    stack_.resize(stack_.size() - in.arity);
    in.slot = stack_.size();
    stack_.push_back(in.type);
    if (stack_.size() > max_depth)
      throw UsageError(fmt::format("fused program: the stack grows past {} values", max_depth));
    p_.depth = std::max(p_.depth, stack_.size());
    p_.code.push_back(in);
  }

  Program& p_;
  const std::vector<DType>& inputs_;
  std::vector<DType> stack_;
  bool dims_given_ = false;
};

}  // namespace

std::size_t Program::elements() const {
  std::size_t n = 1;
  for (std::size_t d : dims) n *= d;
  return n;
}

Program parse(const std::string& text, const std::vector<DType>& inputs) {
  if (inputs.size() > max_inputs)
    throw UsageError(fmt::format("fused program: {} inputs; at most {}", inputs.size(), max_inputs));
  Program p;
  Reader reader(p, inputs);
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const std::size_t end = rest.find(' ');
    const std::string_view token = rest.substr(0, end);
    if (token.find('=') != std::string_view::npos) reader.header(token);
    else reader.code(token);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  reader.finish();
  return p;
}

const char* op_name(Op op) {
  for (const Spelling& s : spellings) {
    if (s.op == op) return s.text.data();
  }
  switch (op) {
    case Op::cast: return "as";
    case Op::uniform: return "uniform";
    case Op::normal: return "normal";
    default: return "?";
  }
}

}  // namespace ferry::kernels::fused
