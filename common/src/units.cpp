#include "ferry/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <limits>

#include "ferry/error.hpp"

namespace ferry {

std::string plural(std::size_t n, const char* one, const char* many) {
  if (n == 1) return fmt::format("1 {}", one);
  return many != nullptr ? fmt::format("{} {}", n, many) : fmt::format("{} {}s", n, one);
}

std::string format_bytes(std::size_t bytes) {
  static constexpr std::array<const char*, 6> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, value < 10.0 ? 2 : 1, units[unit]);
}

std::size_t parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  const std::size_t digits_begin = pos;
  std::uint64_t value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[pos] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
      throw UsageError(fmt::format("byte count '{}' is too large", text));
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == digits_begin) throw UsageError(fmt::format("'{}' is not a byte count (expected e.g. 4096, 64KiB, 1G)", text));
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  std::string suffix;
  for (; pos < text.size(); ++pos) {
    if (std::isspace(static_cast<unsigned char>(text[pos]))) break;
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(text[pos])));
  }
  for (; pos < text.size(); ++pos)
    if (!std::isspace(static_cast<unsigned char>(text[pos])))
      throw UsageError(fmt::format("'{}' is not a byte count (trailing text)", text));
  int shift = 0;
  if (suffix.empty() || suffix == "b") shift = 0;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib") shift = 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib") shift = 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib") shift = 30;
  else if (suffix == "t" || suffix == "tb" || suffix == "tib") shift = 40;
  else throw UsageError(fmt::format("'{}' has an unknown unit '{}' (use B, KiB, MiB, GiB, TiB)", text, suffix));
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift))
    throw UsageError(fmt::format("byte count '{}' is too large", text));
  return static_cast<std::size_t>(value << shift);
}

}  // namespace ferry
