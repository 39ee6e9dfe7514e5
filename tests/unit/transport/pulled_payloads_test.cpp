// Pulled payloads (transport/src/pull.hpp) between two ends of one process.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "pull.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

// Between two processes of one user on one host (a shared-memory lane),
// payloads from pull::pull_from on are copied by the receiver straight out
// of the sender's memory; smaller ones travel. Both ways, bit-exact, and
// counted by the worker that pulled them. In one process here: the pid each
// end proves on the bootstrap socket is this one.

// One echo round trip: on the lane it follows the probes both ways, so
// every payload sent after it is pulled.
void round_trip(Client& client, std::size_t& received) {
  ASSERT_EQ(send_and_wait(*client.connection, text_bytes("ping"), nullptr, 0), "");
  ASSERT_EQ(client.inbox.wait(++received, 10s).size(), received);
}

TEST(PulledPayloads, SameHostPeersPullLargePayloadsBothWays) {
  Server server;
  if (auto why = no_lane(*server.worker)) GTEST_SKIP() << *why;
  Client client(server.listener->port());
  std::size_t received = 0;
  round_trip(client, received);
  const std::size_t sizes[] = {pull::pull_from - 1, pull::pull_from, std::size_t{1} << 20, std::size_t{16} << 20 | 3};
  for (std::size_t bytes : sizes) {
    const Bytes payload = random_bytes(bytes, static_cast<unsigned>(bytes));
    ASSERT_EQ(send_and_wait(*client.connection, text_bytes("blob"), payload.data(), bytes), "");
    auto got = client.inbox.wait(++received, 30s);
    ASSERT_EQ(got.size(), received);
    EXPECT_EQ(got.back().error, "");
    EXPECT_EQ(got.back().header, "blob");
    EXPECT_TRUE(got.back().payload == payload) << bytes << " bytes differ after the echo";
  }
  // The three from pull_from on, each way; the one below it travelled.
  EXPECT_EQ(server.worker->pulled_payloads(), 3u);
  EXPECT_EQ(client.worker->pulled_payloads(), 3u);
}

// A payload of `bytes` echoed bit-exact after the probes, and nothing pulled either way.
void echo_without_pulls(Server& server, Client& client, std::size_t bytes) {
  std::size_t received = 0;
  round_trip(client, received);
  const Bytes payload = random_bytes(bytes, static_cast<unsigned>(bytes));
  ASSERT_EQ(send_and_wait(*client.connection, text_bytes("blob"), payload.data(), payload.size()), "");
  auto got = client.inbox.wait(++received, 30s);
  ASSERT_EQ(got.size(), received);
  EXPECT_TRUE(got.back().payload == payload);
  EXPECT_EQ(server.worker->pulled_payloads(), 0u);
  EXPECT_EQ(client.worker->pulled_payloads(), 0u);
}

TEST(PulledPayloads, FerryPullPayloadsZeroSendsThemAll) {
  ScopedEnv off("FERRY_PULL_PAYLOADS", "0");  // read by both ends here, one process
  Server server;
  if (auto why = no_lane(*server.worker)) GTEST_SKIP() << *why;
  Client client(server.listener->port());
  echo_without_pulls(server, client, std::size_t{4} << 20);
}

// Without a shared-memory lane nothing is pulled: the lane is what says
// both ends are one user on one host.
TEST(PulledPayloads, NoLaneNoPulls) {
  Server server;
  Client client(server.listener->port(), nullptr, /*shared_memory_lane=*/false);
  echo_without_pulls(server, client, std::size_t{1} << 20);
}

// What the peer says about pulls is checked before anything acts on it:
// each control message has one size, and a descriptor must be whole.
TEST(PulledPayloads, ControlMessagesAndDescriptorsAreReadExactly) {
  const pull::ProbeBytes bytes{std::byte{1}, std::byte{2}};
  const auto probe = pull::read_control(pull::probe(&bytes));
  ASSERT_TRUE(probe);
  EXPECT_EQ(probe->kind, pull::Control::probe);
  EXPECT_EQ(probe->address, reinterpret_cast<std::uintptr_t>(bytes.data()));
  EXPECT_EQ(probe->bytes, bytes);
  EXPECT_EQ(pull::read_control(pull::probe(nullptr))->address, 0u);
  const auto released = pull::read_control(pull::released(77, false));
  ASSERT_TRUE(released);
  EXPECT_EQ(released->token, 77u);
  EXPECT_FALSE(released->ok);
  EXPECT_TRUE(pull::read_control(pull::probed()));

  auto longer = pull::probed();
  longer.push_back(std::byte{0});
  EXPECT_FALSE(pull::read_control(longer));
  auto shorter = pull::probe(&bytes);
  shorter.pop_back();
  EXPECT_FALSE(pull::read_control(shorter));
  auto bad_ok = pull::released(1, true);
  bad_ok.back() = std::byte{2};
  EXPECT_FALSE(pull::read_control(bad_ok));
  EXPECT_FALSE(pull::read_control(std::vector<std::byte>{std::byte{9}}));
  EXPECT_FALSE(pull::read_control({}));

  std::vector<std::byte> header;
  pull::append(header, {1, 2, 3});
  const auto d = pull::read_descriptor(header);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->token, 1u);
  EXPECT_EQ(d->address, 2u);
  EXPECT_EQ(d->bytes, 3u);
  header.pop_back();
  EXPECT_FALSE(pull::read_descriptor(header));
}

// A copy out of a process that is gone fails with the reason, not a crash.
TEST(PulledPayloads, ReadingADeadProcessFailsWithItsReason) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  int dest = 0;
  const int source = 5;
  const std::string error = pull::read_from(child, reinterpret_cast<std::uintptr_t>(&source), &dest, sizeof dest);
  EXPECT_NE(error.find("process_vm_readv from process " + std::to_string(child)), std::string::npos) << error;
  EXPECT_EQ(pull::read_from(::getpid(), reinterpret_cast<std::uintptr_t>(&source), &dest, sizeof dest), "");
  EXPECT_EQ(dest, 5);
}

}  // namespace
}  // namespace ferry::transport
