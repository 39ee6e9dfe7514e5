// Reading a kernel's parameter list from CUDA C++ source. Not a C++ parser:
// a tokenizer that skips comments, literals and preprocessor lines, then the
// declaration of the __global__ function with the entry's name. That is all
// a launch needs, and anything it cannot read is refused with its spelling.
#include "cuda_source/cuda_signature.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "ferry/error.hpp"

namespace ferry::detail {

// ---- C types ----

std::size_t size_of(CType type) noexcept {
  switch (type) {
    case CType::i8:
    case CType::u8:
    case CType::boolean: return 1;
    case CType::i16:
    case CType::u16: return 2;
    case CType::i32:
    case CType::u32:
    case CType::f32: return 4;
    case CType::i64:
    case CType::u64:
    case CType::f64: return 8;
    case CType::void_: return 0;
  }
  return 0;
}

const char* to_string(CType type) noexcept {
  switch (type) {
    case CType::i8: return "signed char";
    case CType::u8: return "unsigned char";
    case CType::i16: return "short";
    case CType::u16: return "unsigned short";
    case CType::i32: return "int";
    case CType::u32: return "unsigned int";
    case CType::i64: return "long long";
    case CType::u64: return "unsigned long long";
    case CType::f32: return "float";
    case CType::f64: return "double";
    case CType::boolean: return "bool";
    case CType::void_: return "void";
  }
  return "?";
}

bool is_real(CType type) noexcept { return type == CType::f32 || type == CType::f64; }

std::vector<DType> buffer_dtypes(CType pointee) {
  switch (pointee) {
    case CType::f32: return {DType::f32};
    case CType::f64: return {DType::f64};
    case CType::i32:
    case CType::u32: return {DType::i32};
    case CType::i64:
    case CType::u64: return {DType::i64};
    case CType::i8:
    case CType::u8:
    case CType::boolean: return {DType::u8};
    case CType::void_: return {};
    case CType::i16:
    case CType::u16: break;
  }
  return {DType::u8};  // unreachable for pointees the parser accepts
}

namespace {

// ---- tokens ----

struct Token {
  enum class Kind : std::uint8_t { identifier, number, literal, punct };
  Kind kind;
  std::string_view text;
};

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Tokenizer {
 public:
  explicit Tokenizer(std::string_view source) : s_(source) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    bool line_start = true;  // only whitespace since the last newline: '#' starts a directive
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '\n') {
        line_start = true;
        ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (starts("//")) {
        skip_line();
      } else if (starts("/*")) {
        const std::size_t end = s_.find("*/", pos_ + 2);
        pos_ = end == std::string_view::npos ? s_.size() : end + 2;
      } else if (c == '#' && line_start) {
        skip_directive();
      } else {
        line_start = false;
        out.push_back(next());
      }
    }
    return out;
  }

 private:
  bool starts(std::string_view prefix) const { return s_.substr(pos_, prefix.size()) == prefix; }

  void skip_line() {
    const std::size_t end = s_.find('\n', pos_);
    pos_ = end == std::string_view::npos ? s_.size() : end;
  }

  // A directive runs to the end of its line, continued by a trailing backslash.
  void skip_directive() {
    while (pos_ < s_.size()) {
      const std::size_t end = s_.find('\n', pos_);
      if (end == std::string_view::npos) {
        pos_ = s_.size();
        return;
      }
      std::size_t last = end;
      while (last > pos_ && (s_[last - 1] == '\r' || s_[last - 1] == ' ' || s_[last - 1] == '\t')) --last;
      pos_ = end + 1;
      if (last == 0 || s_[last - 1] != '\\') return;
    }
  }

  Token literal_until(std::size_t start, char quote) {
    std::size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != quote && s_[i] != '\n') i += s_[i] == '\\' ? 2 : 1;
    pos_ = std::min(i + 1, s_.size());
    return {Token::Kind::literal, s_.substr(start, pos_ - start)};
  }

  // R"delim( ... )delim"
  Token raw_string(std::size_t start) {
    // C++ caps the delimiter at 16 characters; a longer one is not a raw
    // string, and searching for it could cost its length per byte.
    constexpr std::size_t max_delimiter = 16;
    const std::size_t open = s_.find('(', pos_);
    if (open == std::string_view::npos || open - pos_ - 1 > max_delimiter) {
      pos_ = s_.size();
      return {Token::Kind::literal, s_.substr(start)};
    }
    const std::string close = ")" + std::string(s_.substr(pos_ + 1, open - pos_ - 1)) + "\"";
    const std::size_t end = s_.find(close, open + 1);
    pos_ = end == std::string_view::npos ? s_.size() : end + close.size();
    return {Token::Kind::literal, s_.substr(start, pos_ - start)};
  }

  Token next() {
    const std::size_t start = pos_;
    const char c = s_[pos_];
    if (ident_start(c)) {
      while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
      const std::string_view word = s_.substr(start, pos_ - start);
      // Encoding prefixes glue onto the literal that follows them.
      const bool raw = word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR";
      const bool prefix = word == "u8" || word == "u" || word == "U" || word == "L";
      if (pos_ < s_.size() && s_[pos_] == '"' && raw) return raw_string(start);
      if (pos_ < s_.size() && (s_[pos_] == '"' || s_[pos_] == '\'') && prefix) return literal_until(start, s_[pos_]);
      return {Token::Kind::identifier, word};
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])))) {
      // Digits, suffixes, exponents (with their sign) and digit separators.
      ++pos_;
      while (pos_ < s_.size()) {
        const char d = s_[pos_];
        const char before = s_[pos_ - 1];
        if (ident_char(d) || d == '.' || (d == '\'' && pos_ + 1 < s_.size() && ident_char(s_[pos_ + 1])) ||
            ((d == '+' || d == '-') && (before == 'e' || before == 'E' || before == 'p' || before == 'P')))
          ++pos_;
        else
          break;
      }
      return {Token::Kind::number, s_.substr(start, pos_ - start)};
    }
    if (c == '"' || c == '\'') return literal_until(start, c);
    if (starts("::")) {
      pos_ += 2;
      return {Token::Kind::punct, s_.substr(start, 2)};
    }
    ++pos_;
    return {Token::Kind::punct, s_.substr(start, 1)};
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

bool is(const Token& t, std::string_view text) { return t.text == text; }

// ---- types ----

const std::vector<std::string_view>& builtin_words() {
  static const std::vector<std::string_view> words = {"unsigned", "signed", "char", "short", "int",
                                                       "long",     "float",  "double", "bool", "void"};
  return words;
}
bool builtin_word(std::string_view w) {
  const auto& words = builtin_words();
  return std::find(words.begin(), words.end(), w) != words.end();
}

// A type spelled with built-in words in any order ("long unsigned int").
std::optional<CType> builtin_type(const std::vector<std::string_view>& words) {
  std::map<std::string_view, int> n;
  for (auto w : words) {
    if (!builtin_word(w)) return std::nullopt;
    ++n[w];
  }
  const int longs = n["long"];
  const bool is_unsigned = n["unsigned"] > 0, is_signed = n["signed"] > 0;
  if (n["unsigned"] + n["signed"] > 1 || longs > 2 || n["short"] > 1 || n["int"] > 1 || n["char"] > 1) return std::nullopt;
  const int others = n["float"] + n["double"] + n["bool"] + n["void"];
  if (others > 0) {
    if (others != 1 || static_cast<int>(words.size()) != 1) return std::nullopt;  // "long double" and the like
    if (n["float"]) return CType::f32;
    if (n["double"]) return CType::f64;
    if (n["bool"]) return CType::boolean;
    return CType::void_;
  }
  if (n["char"]) {
    if (longs > 0 || n["short"] || n["int"]) return std::nullopt;
    return is_unsigned ? CType::u8 : CType::i8;  // plain char is signed on the hosts CUDA supports
  }
  if (n["short"]) {
    if (longs > 0) return std::nullopt;
    return is_unsigned ? CType::u16 : CType::i16;
  }
  if (longs > 0) return is_unsigned ? CType::u64 : CType::i64;  // LP64: long is 64 bits, as on the device
  if (n["int"] || is_unsigned || is_signed) return is_unsigned ? CType::u32 : CType::i32;
  return std::nullopt;
}

std::optional<CType> named_type(std::string_view name) {
  static const std::map<std::string_view, CType> names = {
      {"int8_t", CType::i8},     {"uint8_t", CType::u8},     {"int16_t", CType::i16},  {"uint16_t", CType::u16},
      {"int32_t", CType::i32},   {"uint32_t", CType::u32},   {"int64_t", CType::i64},  {"uint64_t", CType::u64},
      {"size_t", CType::u64},    {"ptrdiff_t", CType::i64},  {"intptr_t", CType::i64}, {"uintptr_t", CType::u64},
      {"ssize_t", CType::i64},
  };
  const auto it = names.find(name);
  return it == names.end() ? std::nullopt : std::optional<CType>(it->second);
}

// Tokens joined the way C++ is usually written: "std::complex<float>", "const float*".
std::string spell(const std::vector<Token>& tokens) {
  std::string out;
  const Token* previous = nullptr;
  for (const Token& t : tokens) {
    const bool glue = previous != nullptr &&
                      (is(t, "::") || is(*previous, "::") || is(t, "<") || is(*previous, "<") || is(t, ">") ||
                       is(t, ",") || is(t, "*") || is(t, "&") || is(t, "[") || is(t, "]") || is(*previous, "["));
    if (previous != nullptr && !glue) out += ' ';
    out += t.text;
    previous = &t;
  }
  return out;
}

const char* const usable_types =
    "use float, double, an integer type (int, unsigned, long long, size_t, ...) or a pointer to float, double, int, "
    "long long or unsigned char";

class SignatureParser {
 public:
  SignatureParser(std::string_view source, std::string_view entry)
      : entry_(entry), tokens_(Tokenizer(source).run()) {
    index();
  }

  CudaSignature parse() {
    std::vector<std::size_t> definitions, declarations;
    bool named_elsewhere = false;
    std::vector<std::string> kernels;
    std::unordered_set<std::string_view> listed;
    for (std::size_t i = 0; i + 1 < tokens_.size(); ++i) {
      const Token& t = tokens_[i];
      if (t.kind != Token::Kind::identifier || !is(tokens_[i + 1], "(")) continue;
      const Prefix prefix = prefix_of(i);
      if (!prefix.global) {
        named_elsewhere = named_elsewhere || t.text == entry_;
        continue;
      }
      // Listed for the error message; __launch_bounds__(...) and the like are not kernels.
      if (!t.text.starts_with("__") && listed.insert(t.text).second) kernels.emplace_back(t.text);
      if (t.text != entry_) continue;
      if (prefix.templated)
        fail("the entry is a template; Ferry launches a kernel by name, so write a non-template __global__ function "
             "(it may call the template)");
      (is_definition(i + 1) ? definitions : declarations).push_back(i);
    }
    if (definitions.size() > 1)
      fail(fmt::format("the source defines {} __global__ functions named '{}'; overloads cannot be launched by name",
                       definitions.size(), entry_));
    if (definitions.empty() && declarations.empty()) {
      std::string what = fmt::format("the source has no __global__ function named '{}'", entry_);
      if (named_elsewhere) what += fmt::format(" ('{}' appears, but not declared __global__)", entry_);
      if (!kernels.empty()) {
        std::string list;
        for (const auto& k : kernels) list += (list.empty() ? "" : ", ") + k;
        what += "; its kernels: " + list;
      }
      fail(what);
    }
    const std::size_t at = definitions.empty() ? declarations.front() : definitions.front();
    CudaSignature signature;
    signature.entry = std::string(entry_);
    const auto pieces = parameter_tokens(at + 1);
    for (std::size_t p = 0; p < pieces.size(); ++p) signature.params.push_back(parameter(pieces[p], p));
    std::unordered_map<std::string_view, std::size_t> first_named;
    for (std::size_t a = 0; a < signature.params.size(); ++a) {
      const std::string& name = signature.params[a].name;
      if (std::find(launch_param_names.begin(), launch_param_names.end(), name) != launch_param_names.end())
        fail(fmt::format("parameter {} is named '{}', which Ferry reserves for the launch configuration; rename it",
                         a + 1, name));
      if (const auto [it, fresh] = first_named.emplace(name, a); !fresh)
        fail(fmt::format("parameters {} and {} are both named '{}'", it->second + 1, a + 1, name));
    }
    return signature;
  }

 private:
  struct Prefix {
    bool global = false;
    bool templated = false;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(fmt::format("cuda_kernel '{}': {}", entry_, what));
  }

  // Everything below answers in constant or logarithmic time from tables
  // built in one pass, because a client's source is untrusted: a walk over
  // earlier tokens per name made `f(f(f(...` quadratic, and ferryd parses
  // what clients send.
  void index() {
    const std::size_t n = tokens_.size();
    globals_before_.assign(n + 1, 0);
    templates_before_.assign(n + 1, 0);
    angle_before_.assign(n + 1, 0);
    match_.assign(n, npos);
    std::vector<std::size_t> open;
    for (std::size_t j = 0; j < n; ++j) {
      const Token& t = tokens_[j];
      globals_before_[j + 1] = globals_before_[j] + (is(t, "__global__") ? 1 : 0);
      templates_before_[j + 1] = templates_before_[j] + (is(t, "template") ? 1 : 0);
      angle_before_[j + 1] = angle_before_[j] + (is(t, ">") ? 1 : is(t, "<") ? -1 : 0);
      if (is(t, "(")) open.push_back(j);
      if (is(t, ")") && !open.empty()) {
        match_[open.back()] = j;
        open.pop_back();
      }
    }
    // body_after_[j]: scanning from j at parenthesis depth 0, a '{' comes
    // before any ';', '}' or unmatched ')'. A parenthesised group is skipped
    // whole, so each entry is found from a later one.
    body_after_.assign(n + 1, 0);
    for (std::size_t j = n; j-- > 0;) {
      const Token& t = tokens_[j];
      if (is(t, "{")) body_after_[j] = 1;
      else if (is(t, ";") || is(t, "}") || is(t, ")")) body_after_[j] = 0;
      else if (is(t, "(")) body_after_[j] = match_[j] == npos ? 0 : body_after_[match_[j] + 1];
      else body_after_[j] = body_after_[j + 1];
    }
  }

  // The words of the declaration before the name, back to the previous
  // statement or block boundary outside angle brackets: "extern "C" __global__ void".
  Prefix prefix_of(std::size_t name) {
    // The boundary is the last ';', '{' or '}' before the name with no more
    // '<' than '>' between it and the name. Boundaries are pushed as the
    // names are met in order; one that a later boundary at no lower angle
    // count follows can never be the answer again, so the stack's counts fall
    // from bottom to top and the answer is found by bisection.
    for (; boundaries_seen_ < name; ++boundaries_seen_) {
      const Token& t = tokens_[boundaries_seen_];
      if (!(is(t, ";") || is(t, "{") || is(t, "}"))) continue;
      const int level = angle_before_[boundaries_seen_ + 1];
      while (!boundaries_.empty() && angle_before_[boundaries_.back() + 1] <= level) boundaries_.pop_back();
      boundaries_.push_back(boundaries_seen_);
    }
    const int level = angle_before_[name];
    // The first element whose count is below `level`; the one before it is the answer.
    const auto it = std::partition_point(boundaries_.begin(), boundaries_.end(),
                                         [&](std::size_t b) { return angle_before_[b + 1] >= level; });
    const std::size_t from = it == boundaries_.begin() ? 0 : *(it - 1) + 1;
    return {globals_before_[name] > globals_before_[from], templates_before_[name] > templates_before_[from]};
  }

  std::size_t matching_paren(std::size_t open) const {
    if (match_[open] == npos) fail("the parameter list is not closed");
    return match_[open];
  }

  // A body follows the parameter list (after attributes or qualifiers).
  bool is_definition(std::size_t open) const { return body_after_[matching_paren(open) + 1] != 0; }

  // The parameters' tokens, split at commas outside brackets.
  std::vector<std::vector<Token>> parameter_tokens(std::size_t open) const {
    const std::size_t close = matching_paren(open);
    std::vector<std::vector<Token>> out(1);
    int depth = 0;
    for (std::size_t j = open + 1; j < close; ++j) {
      const Token& t = tokens_[j];
      if (is(t, "(") || is(t, "<") || is(t, "[") || is(t, "{")) ++depth;
      if (is(t, ")") || is(t, ">") || is(t, "]") || is(t, "}")) --depth;
      if (depth == 0 && is(t, ",")) {
        out.emplace_back();
        continue;
      }
      out.back().push_back(t);
    }
    if (out.size() == 1 && (out[0].empty() || (out[0].size() == 1 && is(out[0][0], "void")))) return {};
    return out;
  }

  CudaParam parameter(std::vector<Token> tokens, std::size_t index) const {
    // A default value is the caller's business, not the type's.
    for (std::size_t j = 0; j < tokens.size(); ++j)
      if (is(tokens[j], "=")) {
        tokens.resize(j);
        break;
      }
    if (tokens.empty()) fail(fmt::format("parameter {} is empty", index + 1));

    CudaParam param;
    // The name: a trailing identifier that is neither a type word nor part of a qualified name.
    const Token& last = tokens.back();
    const bool named = tokens.size() >= 2 && last.kind == Token::Kind::identifier && !builtin_word(last.text) &&
                       !is(tokens[tokens.size() - 2], "::") && !qualifier(last.text);
    std::vector<Token> type(tokens.begin(), tokens.end() - (named ? 1 : 0));
    param.name = named ? std::string(last.text) : fmt::format("arg{}", index + 1);
    param.spelling = spell(type);
    const auto refuse = [&](const std::string& why) -> CudaParam {
      fail(fmt::format("parameter {} '{}' has type '{}', which Ferry cannot pass{}; {}", index + 1, param.name,
                       param.spelling, why, usable_types));
    };

    int stars = 0;
    bool const_before_star = false;
    std::vector<std::string_view> words;
    for (std::size_t j = 0; j < type.size(); ++j) {
      const Token& t = type[j];
      if (is(t, "*")) {
        ++stars;
      } else if (is(t, "const")) {
        if (stars == 0) const_before_star = true;  // const after the '*' makes the pointer const, not the data
      } else if (qualifier(t.text)) {
        continue;
      } else if (is(t, "&") || is(t, "&&") || is(t, "[")) {
        return refuse(is(t, "[") ? " (an array)" : " (a reference)");
      } else if (is(t, "::") && (j == 0 || (j == 1 && is(type[0], "std")))) {
        continue;  // ::size_t, std::size_t
      } else if (is(t, "std") && j + 1 < type.size() && is(type[j + 1], "::")) {
        continue;
      } else if (t.kind == Token::Kind::identifier && stars == 0) {
        words.push_back(t.text);
      } else {
        return refuse("");
      }
    }
    if (stars > 1) return refuse(" (a pointer to a pointer)");
    std::optional<CType> ctype = builtin_type(words);
    if (!ctype && words.size() == 1) ctype = named_type(words[0]);
    if (!ctype) return refuse("");
    param.pointer = stars == 1;
    param.const_pointee = param.pointer && const_before_star;
    param.type = *ctype;
    if (!param.pointer && param.type == CType::void_) return refuse("");
    if (param.pointer && (param.type == CType::i16 || param.type == CType::u16))
      return refuse(" (Ferry buffers hold no 16-bit integers)");
    return param;
  }

  static bool qualifier(std::string_view w) {
    return w == "volatile" || w == "__restrict__" || w == "__restrict" || w == "restrict" ||
           w == "__grid_constant__" || w == "const";
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::string_view entry_;
  std::vector<Token> tokens_;
  std::vector<std::size_t> globals_before_, templates_before_;  // counts in tokens [0, j)
  std::vector<int> angle_before_;                               // '>' less '<' in tokens [0, j)
  std::vector<std::size_t> match_;                              // each '(' its ')'
  std::vector<char> body_after_;
  std::vector<std::size_t> boundaries_;  // see prefix_of
  std::size_t boundaries_seen_ = 0;
};

// ---- calls ----

std::string argument(std::size_t index, std::string_view name) {
  return fmt::format("argument {} '{}'", index + 1, name);
}

// Whether a checked scalar fits the parameter's C type.
bool fits(CType type, const ScalarValue& value) {
  if (is_real(type)) {
    const double d = std::get<double>(value);
    return type == CType::f64 || !std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max();
  }
  const std::int64_t n = std::get<std::int64_t>(value);
  switch (type) {
    case CType::i8: return n >= INT8_MIN && n <= INT8_MAX;
    case CType::u8: return n >= 0 && n <= UINT8_MAX;
    case CType::i16: return n >= INT16_MIN && n <= INT16_MAX;
    case CType::u16: return n >= 0 && n <= UINT16_MAX;
    case CType::i32: return n >= INT32_MIN && n <= INT32_MAX;
    case CType::u32: return n >= 0 && n <= static_cast<std::int64_t>(UINT32_MAX);
    case CType::boolean: return n == 0 || n == 1;
    case CType::i64: return true;
    case CType::u64: return n >= 0;  // what a call can express: scalars travel as int64
    default: return false;
  }
}

// The launch values after the entry's parameters, checked and defaulted.
struct LaunchValues {
  std::int64_t grid[3], block[3], shared;
};

LaunchValues launch_values(const CudaSignature& signature, const KernelArgs& args) {
  const std::size_t base = signature.params.size();
  std::int64_t v[launch_param_names.size()];
  for (std::size_t k = 0; k < launch_param_names.size(); ++k) {
    v[k] = base + k < args.size() ? args.integer(base + k) : 0;
    if (v[k] < 0)
      throw UsageError(fmt::format("{} is {}; launch values are 0 (automatic) or positive",
                                   argument(base + k, launch_param_names[k]), v[k]));
  }
  return {{v[0], v[1], v[2]}, {v[3], v[4], v[5]}, v[6]};
}

}  // namespace

void check_cuda_arguments(const CudaSignature& signature, const KernelArgs& args) {
  for (std::size_t i = 0; i < signature.params.size() && i < args.size(); ++i) {
    const CudaParam& p = signature.params[i];
    const Arg& arg = args[i];
    if (p.pointer) {
      const BufferArg& b = std::get<BufferArg>(arg);
      if (!b.contiguous())
        throw UsageError(fmt::format(
            "{} is a {} x {} view whose rows are {} elements apart; a CUDA kernel gets a bare pointer, so pass a "
            "buffer (or a view of whole rows) whose rows are packed",
            argument(i, p.name), b.rows, b.cols, b.ld));
    } else if (const auto& scalar = std::get<ScalarValue>(arg); !fits(p.type, scalar)) {
      const auto shown = std::holds_alternative<double>(scalar) ? fmt::format("{}", std::get<double>(scalar))
                                                                : fmt::format("{}", std::get<std::int64_t>(scalar));
      throw UsageError(fmt::format("{} is {}, which does not fit in the kernel's {}", argument(i, p.name), shown,
                                   p.spelling));
    }
  }
  resolve_launch(signature, args);
}

CudaLaunch resolve_launch(const CudaSignature& signature, const KernelArgs& args) {
  const LaunchValues v = launch_values(signature, args);
  const std::size_t base = signature.params.size();
  const auto too_big = [&](std::size_t k, std::int64_t limit) {
    return UsageError(fmt::format("{} is {}; CUDA allows at most {}", argument(base + k, launch_param_names[k]),
                                  k < 3 ? v.grid[k] : k < 6 ? v.block[k - 3] : v.shared, limit));
  };
  CudaLaunch launch;
  const std::int64_t block_limits[3] = {1024, 1024, 64};
  const bool auto_block = v.block[0] == 0 && v.block[1] == 0 && v.block[2] == 0;
  for (std::size_t d = 0; d < 3; ++d) {
    if (v.block[d] > block_limits[d]) throw too_big(3 + d, block_limits[d]);
    launch.block[d] = auto_block ? (d == 0 ? default_block : 1u) : static_cast<unsigned>(std::max<std::int64_t>(v.block[d], 1));
  }
  const std::uint64_t threads = std::uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
  if (threads > 1024)
    throw UsageError(fmt::format("the block has {} x {} x {} = {} threads; CUDA allows at most 1024", launch.block[0],
                                 launch.block[1], launch.block[2], threads));

  const std::int64_t grid_limits[3] = {2147483647, 65535, 65535};
  for (std::size_t d = 0; d < 3; ++d)
    if (v.grid[d] > grid_limits[d]) throw too_big(d, grid_limits[d]);
  if (v.grid[0] == 0 && v.grid[1] == 0 && v.grid[2] == 0) {
    // Automatic: one thread per element of the first buffer.
    const auto first = std::find_if(signature.params.begin(), signature.params.end(),
                                    [](const CudaParam& p) { return p.pointer; });
    if (first == signature.params.end())
      throw UsageError(fmt::format("kernel {} takes no buffer to size its grid by; pass {} (and {})", signature.entry,
                                   launch_param_names[0], launch_param_names[3]));
    const std::size_t index = static_cast<std::size_t>(first - signature.params.begin());
    const std::uint64_t elements = args.buffer(index).elements();
    const std::uint64_t blocks = std::max<std::uint64_t>(1, (elements + threads - 1) / threads);
    if (blocks > static_cast<std::uint64_t>(grid_limits[0]))
      throw UsageError(fmt::format("{} has {} elements, more than one launch of {}-thread blocks covers; pass {}",
                                   argument(index, first->name), elements, threads, launch_param_names[0]));
    launch.grid[0] = static_cast<unsigned>(blocks);
    launch.grid[1] = launch.grid[2] = 1;
  } else {
    for (std::size_t d = 0; d < 3; ++d) launch.grid[d] = static_cast<unsigned>(std::max<std::int64_t>(v.grid[d], 1));
  }

  // Above what any GPU so far offers a block (227 KiB on Hopper); the device's own limit applies at launch.
  constexpr std::int64_t max_shared = 256 * 1024;
  if (v.shared > max_shared) throw too_big(6, max_shared);
  launch.shared_bytes = static_cast<unsigned>(v.shared);
  return launch;
}

PackedArguments pack_arguments(const CudaSignature& signature, const KernelArgs& args) {
  PackedArguments packed;
  packed.slots.assign(signature.params.size(), 0);
  for (std::size_t i = 0; i < signature.params.size(); ++i) {
    const CudaParam& p = signature.params[i];
    void* slot = &packed.slots[i];
    if (p.pointer) {
      void* data = args.buffer(i).data;
      std::memcpy(slot, &data, sizeof data);
      continue;
    }
    const auto put = [slot](auto value) { std::memcpy(slot, &value, sizeof value); };
    switch (p.type) {
      case CType::f32: put(static_cast<float>(args.real(i))); break;
      case CType::f64: put(args.real(i)); break;
      case CType::i8: put(static_cast<std::int8_t>(args.integer(i))); break;
      case CType::u8: put(static_cast<std::uint8_t>(args.integer(i))); break;
      case CType::boolean: put(static_cast<bool>(args.integer(i))); break;
      case CType::i16: put(static_cast<std::int16_t>(args.integer(i))); break;
      case CType::u16: put(static_cast<std::uint16_t>(args.integer(i))); break;
      case CType::i32: put(static_cast<std::int32_t>(args.integer(i))); break;
      case CType::u32: put(static_cast<std::uint32_t>(args.integer(i))); break;
      case CType::i64: put(args.integer(i)); break;
      case CType::u64: put(static_cast<std::uint64_t>(args.integer(i))); break;
      case CType::void_: throw Error(fmt::format("kernel {}: parameter {} is void", signature.entry, i + 1));
    }
  }
  packed.pointers.reserve(packed.slots.size());
  for (auto& slot : packed.slots) packed.pointers.push_back(&slot);
  return packed;
}

CudaSignature parse_cuda_signature(std::string_view source, std::string_view entry) {
  if (entry.empty()) throw UsageError("cuda_kernel: the entry (the kernel's name) is empty");
  bool identifier = ident_start(entry[0]);
  for (char c : entry) identifier = identifier && ident_char(c);
  if (!identifier) throw UsageError(fmt::format("cuda_kernel '{}': the entry must be a C identifier", entry));
  return SignatureParser(source, entry).parse();
}

}  // namespace ferry::detail
