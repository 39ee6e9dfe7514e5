#include "cuda_source/cuda_signature_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace ferry::detail {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

namespace {

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

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Tokenizer(source).run(); }

}  // namespace ferry::detail
