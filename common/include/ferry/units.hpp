// Human-readable quantities for messages and reports.
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

// 1536 -> "1.5 KiB"; exact byte counts below 1 KiB.
std::string format_bytes(std::size_t bytes);

// Parses "64MiB", "4 KiB", "1G", "4096"; throws UsageError naming the text.
std::size_t parse_bytes(const std::string& text);

}  // namespace ferry
