// The tokens of CUDA C++ source, as the signature parser reads them:
// comments, whitespace and preprocessor lines skipped, literals kept whole.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::detail {

struct Token {
  enum class Kind : std::uint8_t { identifier, number, literal, punct };
  Kind kind;
  std::string_view text;
};

// Views into `source`, which must outlive them.
std::vector<Token> tokenize(std::string_view source);

bool ident_start(char c);
bool ident_char(char c);
inline bool is(const Token& t, std::string_view text) { return t.text == text; }

}  // namespace ferry::detail
