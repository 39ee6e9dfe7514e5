// Which hosts this ferryd may dial when a client tells it to fetch from one
// (--fetch-from, docs/security.md). A client names the source, so without a
// list any tenant could make ferryd dial anything it reaches: services
// behind the firewall, the cloud's metadata address. The default,
// loopback and private networks, is where a GPU pool's hosts are; the
// operator narrows it to the pool's own addresses, or opens it ("any").
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::ferryd {

class FetchSources {
 public:
  static constexpr std::string_view default_list = "loopback,private";

  // A comma-separated list of: any; loopback (127.0.0.0/8, ::1); private
  // (10/8, 172.16/12, 192.168/16, fc00::/7); ADDRESS/BITS; HOST or
  // HOST:PORT ([IPV6]:PORT), a name resolved now to every address it has.
  // Throws UsageError naming the entry that is none of these.
  static FetchSources parse(std::string_view list);

  // Whether a fetch may dial `address` (numeric, with its port).
  bool allows(const sockaddr_storage& address) const;
  const std::string& text() const noexcept { return text_; }

 private:
  struct Rule {
    int family = 0;  // AF_INET or AF_INET6; 0: any address
    std::array<std::uint8_t, 16> bytes{};
    unsigned bits = 0;       // prefix length
    std::uint16_t port = 0;  // 0: any port
  };
  void add(std::string_view entry);

  std::vector<Rule> rules_;
  std::string text_;
};

}  // namespace ferry::ferryd
