#include "fetch_sources.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

#include "ferry/error.hpp"

namespace ferry::ferryd {
namespace {

struct Numeric {
  int family = 0;
  std::array<std::uint8_t, 16> bytes{};
  std::uint16_t port = 0;
};

// An IPv4 peer reached through a dual-stack socket reads as ::ffff:a.b.c.d:
// the same host, so the same rules.
Numeric numeric(const sockaddr_storage& address) {
  Numeric out;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    out.family = AF_INET;
    std::memcpy(out.bytes.data(), &v4.sin_addr, 4);
    out.port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    out.port = ntohs(v6.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      out.family = AF_INET;
      std::memcpy(out.bytes.data(), v6.sin6_addr.s6_addr + 12, 4);
    } else {
      out.family = AF_INET6;
      std::memcpy(out.bytes.data(), v6.sin6_addr.s6_addr, 16);
    }
  }
  return out;
}

bool prefix_matches(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b, unsigned bits) {
  const unsigned whole = bits / 8, rest = bits % 8;
  if (std::memcmp(a.data(), b.data(), whole) != 0) return false;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

// A numeric address, or family 0.
Numeric parse_ip(const std::string& text) {
  Numeric out;
  if (::inet_pton(AF_INET, text.c_str(), out.bytes.data()) == 1) {
    out.family = AF_INET;
  } else if (::inet_pton(AF_INET6, text.c_str(), out.bytes.data()) == 1) {
    out.family = AF_INET6;
  }
  return out;
}

std::uint16_t parse_port(std::string_view entry, std::string_view text) {
  unsigned port = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || port == 0 || port > 65535)
    throw UsageError(fmt::format("--fetch-from '{}': '{}' is not a port (1-65535)", entry, text));
  return static_cast<std::uint16_t>(port);
}

}  // namespace

FetchSources FetchSources::parse(std::string_view list) {
  FetchSources sources;
  sources.text_ = std::string(list);
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view entry = list.substr(start, comma - start);
    if (entry.empty()) throw UsageError(fmt::format("--fetch-from '{}': an empty entry", list));
    sources.add(entry);
    start = comma + 1;
  }
  return sources;
}

void FetchSources::add(std::string_view entry) {
  const auto cidr = [&](const char* ip, unsigned bits) {
    const Numeric n = parse_ip(ip);
    rules_.push_back(Rule{n.family, n.bytes, bits, 0});
  };
  if (entry == "any") return rules_.push_back(Rule{});
  if (entry == "loopback") {
    cidr("127.0.0.0", 8);
    cidr("::1", 128);
    return;
  }
  if (entry == "private") {
    cidr("10.0.0.0", 8);
    cidr("172.16.0.0", 12);
    cidr("192.168.0.0", 16);
    cidr("fc00::", 7);
    return;
  }
  if (const auto slash = entry.find('/'); slash != std::string_view::npos) {
    const Numeric n = parse_ip(std::string(entry.substr(0, slash)));
    unsigned bits = 0;
    const std::string_view bits_text = entry.substr(slash + 1);
    const auto [end, error] = std::from_chars(bits_text.data(), bits_text.data() + bits_text.size(), bits);
    const unsigned most = n.family == AF_INET ? 32 : 128;
    if (n.family == 0 || bits_text.empty() || error != std::errc{} || end != bits_text.data() + bits_text.size() ||
        bits > most)
      throw UsageError(fmt::format("--fetch-from '{}': expected ADDRESS/BITS like 10.0.0.0/8", entry));
    rules_.push_back(Rule{n.family, n.bytes, bits, 0});
    return;
  }
  // HOST, HOST:PORT, [IPV6], [IPV6]:PORT or a bare IPV6 address.
  std::string host(entry);
  std::uint16_t port = 0;
  if (entry.front() == '[') {
    const auto close = entry.find(']');
    if (close == std::string_view::npos) throw UsageError(fmt::format("--fetch-from '{}': an unclosed [", entry));
    host = std::string(entry.substr(1, close - 1));
    const std::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw UsageError(fmt::format("--fetch-from '{}': expected [IPV6]:PORT", entry));
      port = parse_port(entry, rest.substr(1));
    }
  } else if (entry.find(':') == entry.rfind(':') && entry.find(':') != std::string_view::npos) {
    const auto colon = entry.find(':');
    host = std::string(entry.substr(0, colon));
    port = parse_port(entry, entry.substr(colon + 1));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    throw UsageError(fmt::format("--fetch-from '{}': host '{}' does not resolve: {}", entry, host, gai_strerror(rc)));
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, a->ai_addr, a->ai_addrlen);
    const Numeric n = numeric(address);
    rules_.push_back(Rule{n.family, n.bytes, n.family == AF_INET ? 32u : 128u, port});
  }
  ::freeaddrinfo(found);
}

bool FetchSources::allows(const sockaddr_storage& address) const {
  const Numeric n = numeric(address);
  if (n.family == 0) return false;
  for (const Rule& rule : rules_) {
    if (rule.family == 0) return true;
    if (rule.family == n.family && (rule.port == 0 || rule.port == n.port) &&
        prefix_matches(rule.bytes, n.bytes, rule.bits))
      return true;
  }
  return false;
}

}  // namespace ferry::ferryd
