// Command-line helpers shared by the benchmarks: --key=value options and
// comma-separated lists.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {

// The value of `--key=value` when `arg` is that option.
inline std::optional<std::string> option(const std::string& arg, const char* key) {
  const std::string prefix(key);
  return arg.starts_with(prefix) ? std::optional(arg.substr(prefix.size())) : std::nullopt;
}

// "1,4,16" -> {1, 4, 16}
template <typename T>
std::vector<T> list(const std::string& s) {
  std::vector<T> out;
  for (std::size_t b = 0; b < s.size();) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    out.push_back(static_cast<T>(std::stoul(s.substr(b, e - b))));
    b = e + 1;
  }
  return out;
}

// "a,b,,c" -> {"a", "b", "c"}
inline std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t b = 0; b <= s.size();) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace ferry::bench
