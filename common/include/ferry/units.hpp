// Human-readable quantities for messages and reports.
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

// 1536 -> "1.5 KiB"; exact byte counts below 1 KiB.
std::string format_bytes(std::size_t bytes);

// (1, "key") -> "1 key", (3, "key") -> "3 keys"; `many` where adding "s" is
// wrong. For counts in messages, so a message never says "1 keys".
std::string plural(std::size_t n, const char* one, const char* many = nullptr);

// Parses "64MiB", "4 KiB", "1G", "4096"; throws UsageError naming the text.
std::size_t parse_bytes(const std::string& text);

}  // namespace ferry
