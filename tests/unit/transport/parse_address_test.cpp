// parse_address: what a peer address may look like, and what a bad one is told.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "ferry/error.hpp"
#include "ferry/transport/address.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(ParseAddress, AcceptsSchemeOrBareHostPort) {
  EXPECT_EQ(parse_address("ucx://gpu-1:13337"), (std::pair<std::string, std::uint16_t>{"gpu-1", 13337}));
  EXPECT_EQ(parse_address("10.0.0.2:1"), (std::pair<std::string, std::uint16_t>{"10.0.0.2", 1}));
  EXPECT_EQ(parse_address("ucx://[::1]:80"), (std::pair<std::string, std::uint16_t>{"::1", 80}));
  EXPECT_EQ(parse_address("host:0").second, 0);
  EXPECT_EQ(parse_address("host:65535").second, 65535);
}

TEST(ParseAddress, RejectsWithMessagesNamingTheText) {
  auto message = [](const std::string& text) {
    try {
      parse_address(text);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no UsageError");
  };
  EXPECT_NE(message("ucx://gpu-1").find("no port"), std::string::npos) << message("ucx://gpu-1");
  EXPECT_NE(message("gpu-1:").find("no port"), std::string::npos);
  EXPECT_NE(message("ucx://:80").find("empty host"), std::string::npos);
  EXPECT_NE(message("gpu-1:65536").find("out of range"), std::string::npos);
  EXPECT_NE(message("gpu-1:99999999999999999999").find("out of range"), std::string::npos);
  EXPECT_NE(message("gpu-1:http").find("not a number"), std::string::npos);
  EXPECT_NE(message("gpu-1:-1").find("not a number"), std::string::npos);
  EXPECT_NE(message("gpu-1:12ab").find("'gpu-1:12ab'"), std::string::npos);
}

}  // namespace
}  // namespace ferry::transport
