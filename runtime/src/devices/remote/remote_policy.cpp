#include "devices/remote/remote_policy.hpp"

#include <fmt/format.h>

#include "ferry/transport/address.hpp"

namespace ferry::detail {

bool permanent(protocol::Status status) noexcept {
  switch (status) {
    case protocol::Status::auth_failed:
    case protocol::Status::version_mismatch:
    case protocol::Status::malformed:
    case protocol::Status::out_of_order:
      return true;
    default:
      return false;  // shutting_down, internal...: the next server may answer
  }
}

std::string remote_address(const std::string& text) {
  std::string_view rest = text;
  if (rest.starts_with("ucx://")) rest.remove_prefix(6);
  if (const auto scheme = rest.find("://"); scheme != std::string_view::npos)
    throw UsageError(fmt::format("remote '{}': '{}://' is not a scheme Ferry speaks; write ucx://host:port or host:port",
                                 text, rest.substr(0, scheme)));
  if (rest.find('/') != std::string_view::npos)
    throw UsageError(fmt::format("remote '{}': an address has no path; write ucx://host:port or host:port", text));
  const std::string bare(rest);
  const auto [host, port] = transport::parse_address(bare);  // throws UsageError naming what is wrong
  if (port == 0) throw UsageError(fmt::format("remote '{}': port 0 is not a port a ferryd listens on", text));
  return bare;
}

RemotePolicy parse_remote_policy(std::string_view text) {
  if (text == "require") return RemotePolicy::require;
  if (text == "prefer") return RemotePolicy::prefer;
  throw UsageError(fmt::format("remote policy '{}': expected require or prefer", text));
}

const char* to_string(RemotePolicy policy) noexcept {
  return policy == RemotePolicy::require ? "require" : "prefer";
}

}  // namespace ferry::detail
