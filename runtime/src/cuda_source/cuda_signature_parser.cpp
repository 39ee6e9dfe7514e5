// Reading a kernel's parameter list from CUDA C++ source. Not a C++ parser:
// the tokens (cuda_signature_lexer.hpp), then the declaration of the
// __global__ function with the entry's name. That is all a launch needs,
// and anything it cannot read is refused with its spelling.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "cuda_source/cuda_signature.hpp"
#include "cuda_source/cuda_signature_lexer.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

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
      : entry_(entry), tokens_(tokenize(source)) {
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

}  // namespace

CudaSignature parse_cuda_signature(std::string_view source, std::string_view entry) {
  if (entry.empty()) throw UsageError("cuda_kernel: the entry (the kernel's name) is empty");
  bool identifier = ident_start(entry[0]);
  for (char c : entry) identifier = identifier && ident_char(c);
  if (!identifier) throw UsageError(fmt::format("cuda_kernel '{}': the entry must be a C identifier", entry));
  return SignatureParser(source, entry).parse();
}

}  // namespace ferry::detail
