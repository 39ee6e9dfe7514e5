// Which sources --fetch-from lets a fetch dial, alone (ferryd_fetch_limits_test
// checks a refused source end to end).
#include "fetch_sources.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

#include "ferry/error.hpp"

namespace {

using ferry::ferryd::FetchSources;

sockaddr_storage at(const std::string& ip, std::uint16_t port) {
  sockaddr_storage address{};
  if (ip.find(':') == std::string::npos) {
    auto& v4 = reinterpret_cast<sockaddr_in&>(address);
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET, ip.c_str(), &v4.sin_addr), 1) << ip;
  } else {
    auto& v6 = reinterpret_cast<sockaddr_in6&>(address);
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET6, ip.c_str(), &v6.sin6_addr), 1) << ip;
  }
  return address;
}

TEST(FetchSources, TheDefaultIsLoopbackAndPrivateNetworks) {
  const auto sources = FetchSources::parse(FetchSources::default_list);
  for (const char* ip : {"127.0.0.1", "127.8.9.10", "::1", "10.78.2.2", "172.16.0.1", "172.31.255.255", "192.168.1.1",
                         "fd00::5", "::ffff:10.0.0.1"})
    EXPECT_TRUE(sources.allows(at(ip, 7000))) << ip;
  // Link-local holds the clouds' metadata service; the rest is the internet.
  for (const char* ip :
       {"169.254.169.254", "8.8.8.8", "172.32.0.1", "11.0.0.1", "fe80::1", "2001:db8::1", "::ffff:8.8.8.8"})
    EXPECT_FALSE(sources.allows(at(ip, 7000))) << ip;
}

TEST(FetchSources, AddressesPrefixesAndPorts) {
  const auto sources = FetchSources::parse("10.1.0.0/16,127.0.0.1:7070,[::1]:9000,192.0.2.7");
  EXPECT_TRUE(sources.allows(at("10.1.200.3", 1)));
  EXPECT_FALSE(sources.allows(at("10.2.0.1", 1)));
  EXPECT_TRUE(sources.allows(at("127.0.0.1", 7070)));
  EXPECT_FALSE(sources.allows(at("127.0.0.1", 7071)));
  EXPECT_FALSE(sources.allows(at("127.0.0.2", 7070)));
  EXPECT_TRUE(sources.allows(at("::1", 9000)));
  EXPECT_FALSE(sources.allows(at("::1", 9001)));
  EXPECT_TRUE(sources.allows(at("192.0.2.7", 5)));
  EXPECT_TRUE(FetchSources::parse("any").allows(at("8.8.8.8", 53)));
  EXPECT_TRUE(FetchSources::parse("localhost:7000").allows(at("127.0.0.1", 7000)));
}

TEST(FetchSources, AnEntryThatIsNoneOfThemIsRefusedByName) {
  for (const char* bad : {"", "loopback,", "10.0.0.0/33", "10.0.0.0/x", "nonsense/8", "127.0.0.1:0", "127.0.0.1:99999",
                          "[::1", "[::1]7000"}) {
    try {
      FetchSources::parse(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const ferry::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--fetch-from"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
