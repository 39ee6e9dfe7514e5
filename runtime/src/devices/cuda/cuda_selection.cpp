#include "devices/cuda/cuda_selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>

#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

std::string trimmed_lower(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string what_there_is(int available) {
  if (available == 0) return fmt::format("this host has no usable GPU ({})", cuda::unavailable_reason());
  return fmt::format("this host has {} GPU{} (0-{})", available, available == 1 ? "" : "s", available - 1);
}

}  // namespace

bool selects_no_gpu(const std::string& spec) { return trimmed_lower(spec) == "none"; }

bool selects_all_gpus(const std::string& spec) {
  const std::string text = trimmed_lower(spec);
  return text.empty() || text == "all";
}

std::vector<int> select_gpus(const std::string& spec, int available) {
  const std::string text = trimmed_lower(spec);
  std::vector<int> out;
  if (selects_all_gpus(spec)) {
    for (int i = 0; i < available; ++i) out.push_back(i);
    return out;
  }
  if (text == "none") return out;
  for (std::size_t begin = 0; begin <= text.size();) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = trimmed_lower(std::string_view(text).substr(begin, comma - begin));
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || ordinal < 0)
      throw UsageError(fmt::format("gpus '{}': '{}' is not a GPU ordinal (use all, none or ordinals like 0,1)", spec,
                                   item));
    if (std::find(out.begin(), out.end(), ordinal) != out.end())
      throw UsageError(fmt::format("gpus '{}': GPU {} is listed twice", spec, ordinal));
    out.push_back(ordinal);
    begin = comma + 1;
  }
  for (int ordinal : out)
    if (ordinal >= available)
      throw UsageError(fmt::format("gpus '{}': there is no GPU {}: {}", spec, ordinal, what_there_is(available)));
  return out;
}

}  // namespace ferry::detail
