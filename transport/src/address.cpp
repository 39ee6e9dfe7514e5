#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/transport/address.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

std::pair<std::string, std::uint16_t> parse_address(const std::string& text) {
  constexpr std::string_view scheme = "ucx://";
  std::string_view rest = text;
  if (rest.starts_with(scheme)) rest.remove_prefix(scheme.size());
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) {
    throw UsageError("address '" + text + "' has no port; expected [ucx://]host:port");
  }
  auto host = rest.substr(0, colon);
  auto port_text = rest.substr(colon + 1);
  // "[::1]:80": brackets keep an IPv6 address's colons apart from the port's.
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) throw UsageError("address '" + text + "' has an empty host; expected [ucx://]host:port");
  if (port_text.empty()) throw UsageError("address '" + text + "' has no port; expected [ucx://]host:port");
  unsigned long port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error == std::errc::result_out_of_range || (error == std::errc{} && port > 65535)) {
    throw UsageError("address '" + text + "': port " + std::string(port_text) + " is out of range (0-65535)");
  }
  if (error != std::errc{} || end != port_text.data() + port_text.size()) {
    throw UsageError("address '" + text + "': port '" + std::string(port_text) + "' is not a number");
  }
  return {std::string(host), static_cast<std::uint16_t>(port)};
}

std::string format_sockaddr(const sockaddr_storage& address) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "(unknown address family " + std::to_string(address.ss_family) + ")";
}

std::uint16_t sockaddr_port(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

socklen_t resolve(const std::string& host, std::uint16_t port, sockaddr_storage& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  auto service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    // EAI_AGAIN: the resolver did not answer this time, which a later try
    // may fix; anything else says the name itself is no good.
    throw UcxError("cannot resolve '" + host + ":" + service + "': " + gai_strerror(rc),
                   rc == EAI_AGAIN ? UCS_ERR_UNREACHABLE : UCS_ERR_INVALID_ADDR);
  }
  const addrinfo* chosen = list;
  for (auto* entry = list; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_family == AF_INET) {
      chosen = entry;
      break;
    }
  }
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, chosen->ai_addr, chosen->ai_addrlen);
  auto length = chosen->ai_addrlen;
  freeaddrinfo(list);
  return length;
}

}  // namespace ferry::transport
