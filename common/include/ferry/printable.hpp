// A string a peer chose, made safe to write into a log line: control
// characters (newlines, escape sequences) are shown escaped, bytes outside
// printable ASCII as \xNN, and the length capped. Without it a client's
// name could start a forged log line or drive the operator's terminal.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

inline constexpr std::size_t printable_limit = 128;

inline std::string printable(std::string_view text, std::size_t limit = printable_limit) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(text.size(), limit) + 2);
  std::size_t shown = 0;
  for (; shown < text.size() && out.size() < limit; ++shown) {
    const auto c = static_cast<unsigned char>(text[shown]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else {
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        }
    }
  }
  if (shown < text.size()) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

// A message for a peer with this host's file paths taken out: every word
// that starts with '/' becomes "<path>". A compiler's log names the headers
// it read (or tried), and a remote client is not to learn the server's files.
inline std::string without_paths(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto starts_word = [&](std::size_t i) {
    if (i == 0) return true;
    const char c = text[i - 1];
    return c == ' ' || c == '\t' || c == '\n' || c == '"' || c == '\'' || c == '(' || c == '<' || c == '=' ||
           c == '`' || c == '[' || c == ',';
  };
  const auto ends_path = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' || c == '(' || c == ')' ||
           c == '>' || c == ':' || c == ',' || c == '`' || c == ']';
  };
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == '/' && starts_word(i) && i + 1 < text.size() && !ends_path(text[i + 1]) && text[i + 1] != '/') {
      while (i < text.size() && !ends_path(text[i])) ++i;
      out += "<path>";
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace ferry
