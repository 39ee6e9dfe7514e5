#include "ucx_tls.hpp"

#include <algorithm>

namespace ferry::transport {

bool tls_may_open(const char* tls, std::initializer_list<std::string_view> names) {
  if (tls == nullptr) return true;
  std::string_view list(tls);
  const bool left_out = list.starts_with('^');
  if (left_out) list.remove_prefix(1);
  bool named = false;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    named = named || (!left_out && name == "all") || std::ranges::find(names, name) != names.end();
    list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
  }
  return left_out ? !named : named;
}

}  // namespace ferry::transport
