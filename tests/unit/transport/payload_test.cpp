// Payloads of every size echo bit-exact, eager and rendezvous alike.
#include <gtest/gtest.h>

#include <tuple>

#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

class Payload : public ::testing::TestWithParam<std::tuple<Protocol, std::size_t>> {};

TEST_P(Payload, EchoesBitExact) {
  auto [protocol, size] = GetParam();
  ScopedEnv env("UCX_RNDV_THRESH", rndv_thresh(protocol));
  Server server;
  Client client(server.listener->port());
  auto payload = random_bytes(size, static_cast<unsigned>(size));
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("blob"), payload.data(), payload.size()), "");
  auto got = client.inbox.wait(1, 30s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(got[0].header, "blob");
  ASSERT_EQ(got[0].payload.size(), size);
  EXPECT_TRUE(got[0].payload == payload) << "payload differs";
}

std::string payload_name(const ::testing::TestParamInfo<Payload::ParamType>& info) {
  auto [protocol, size] = info.param;
  const char* names[] = {"auto", "eager", "rndv"};
  auto bytes = size >= (1u << 20) ? std::to_string(size >> 20) + "MiB"
               : size >= 1024     ? std::to_string(size >> 10) + "KiB"
                                  : std::to_string(size) + "B";
  return std::string(names[static_cast<int>(protocol)]) + "_" + bytes;
}

INSTANTIATE_TEST_SUITE_P(Sizes, Payload,
                         ::testing::Combine(::testing::Values(Protocol::automatic),
                                            ::testing::Values(1, 8 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)),
                         payload_name);
INSTANTIATE_TEST_SUITE_P(Forced, Payload,
                         ::testing::Combine(::testing::Values(Protocol::eager, Protocol::rendezvous),
                                            ::testing::Values(1, 64 << 10, 4 << 20)),
                         payload_name);

}  // namespace
}  // namespace ferry::transport
