// Addresses as users write them: "host:port", "[ipv6]:port", "ucx://host:port".
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace ferry::transport {

// "ucx://host:port" or "host:port" -> (host, port); throws UsageError naming the text.
std::pair<std::string, std::uint16_t> parse_address(const std::string& text);

}  // namespace ferry::transport
