// ferryd as a client sees it: the handshake, refusals, and what a
// misbehaving client gets (while everyone else keeps being served).
#include <thread>
#include <gtest/gtest.h>

#include <random>

#include "../support/scoped_env.hpp"
#include "ferryd_process.hpp"
#include "raw_peer.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Status;

TEST(Ferryd, GoodTokenIsWelcomed) {
  FerrydProcess server;
  TestClient client(server.port());
  const auto welcome = client.authenticate(FerrydProcess::default_token);
  EXPECT_EQ(welcome.server.rfind("ferryd ", 0), 0u) << welcome.server;
  EXPECT_EQ(welcome.cpu_workers, 2u);
  EXPECT_EQ(welcome.gpus, 0u);
  EXPECT_GT(welcome.memory_quota, 0u);
  EXPECT_GE(welcome.max_payload, 1u << 20);
  client.send(proto::Ping{7});
  EXPECT_EQ(client.next_as<proto::Pong>().request, 7u);
}

// Over TCP alone (UCX_TLS=tcp, as between the hosts of a pool), ferryd gives
// UCX no shared-memory setting: UCX printed "invalid configuration:
// MM_ERROR_HANDLING=y" on stderr for every UCX worker it made.
TEST(Ferryd, OverTcpAloneUcxIsGivenNoSettingItCannotUse) {
  ScopedEnv tcp_alone("UCX_TLS", "tcp");  // ferryd's and this test's client's, as between hosts
  FerrydProcess server;
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  client.send(proto::Ping{1});
  EXPECT_EQ(client.next_as<proto::Pong>().request, 1u);
  // UCX writes its warnings with stdio, to the log file: whole once ferryd has exited.
  EXPECT_EQ(server.stop(SIGTERM), 0);
  EXPECT_EQ(server.log().find("invalid configuration"), std::string::npos) << server.log();
}

// The helper every integration test starts ferryd with: CPU only unless the
// test names GPUs, so a GPU host gives the same answers as this one.
TEST(FerrydProcessHelper, ServesOnTheCpuUnlessTheTestNamesGpus) {
  const auto gpus_of = [](const std::vector<std::string>& args) {
    std::vector<std::string> values;
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--gpus") values.push_back(args[i + 1]);
    return values;
  };
  const auto plain = FerrydProcess::server_args(0, "/t/token", "/t/port", {});
  EXPECT_EQ(gpus_of(plain), std::vector<std::string>{"none"});
  const auto quota = FerrydProcess::server_args(0, "/t/token", "/t/port", {"--client-quota", "1MiB"});
  EXPECT_EQ(gpus_of(quota), std::vector<std::string>{"none"});
  EXPECT_EQ(quota.back(), "1MiB") << "the test's own arguments come last";
  const auto all = FerrydProcess::server_args(0, "/t/token", "/t/port", {"--gpus", "all"});
  EXPECT_EQ(gpus_of(all), std::vector<std::string>{"all"});
  const auto joined = FerrydProcess::server_args(0, "/t/token", "/t/port", {"--gpus=0"});
  EXPECT_TRUE(gpus_of(joined).empty());
  EXPECT_EQ(std::count(joined.begin(), joined.end(), "--gpus=0"), 1);

  // And the server it starts says so itself.
  FerrydProcess server;
  EXPECT_TRUE(server.wait_for_log("0 GPUs")) << server.log();
}

TEST(Ferryd, BadTokenIsRefusedAndLogged) {
  FerrydProcess server;
  TestClient client(server.port(), "intruder");
  transport::DialOptions options;
  options.token = "not the token";
  const auto why = client.refusal(options);
  EXPECT_NE(why.find("auth_failed"), std::string::npos) << why;
  EXPECT_TRUE(server.wait_for_log("token is not ferryd's")) << server.log();
  EXPECT_NE(server.log().find("intruder"), std::string::npos) << server.log();
}

TEST(Ferryd, HandshakeMessageOverUcxIsOutOfOrder) {
  FerrydProcess server;
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  client.send(proto::Hello{proto::oldest_version, proto::version, "again"});
  const auto error = client.next_as<proto::ErrorMessage>();
  EXPECT_EQ(error.status, Status::out_of_order) << error.message;
  EXPECT_TRUE(client.wait_closed());
}

TEST(Ferryd, SilentPeerIsDroppedAfterTheHandshakeTimeout) {
  FerrydProcess server({"--handshake-timeout", "0.5"});
  RawPeer silent(server.port());
  TestClient prompt(server.port());
  prompt.authenticate(FerrydProcess::default_token);
  EXPECT_TRUE(silent.closed_within(std::chrono::seconds(10))) << "a peer that never said hello was kept";
  EXPECT_TRUE(server.wait_for_log("no handshake within 500 ms")) << server.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  prompt.send(proto::Ping{3});  // an authenticated client is not subject to it
  EXPECT_EQ(prompt.next_as<proto::Pong>().request, 3u);
}

TEST(Ferryd, VersionWithNothingInCommonIsRefused) {
  FerrydProcess server;
  RawPeer peer(server.port());
  proto::Hello hello{proto::version + 1, proto::version + 5, "future"};
  const auto body = proto::encode(hello);
  std::vector<std::byte> frame(4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<std::byte>(body.size() >> (8 * i));
  frame.insert(frame.end(), body.begin(), body.end());
  ASSERT_TRUE(peer.send(frame));
  bool closed = false;
  const auto reply = peer.read_until_closed(std::chrono::seconds(10), closed);
  EXPECT_TRUE(closed);
  ASSERT_GT(reply.size(), 4u);
  const auto message = proto::decode(std::span(reply).subspan(4));
  ASSERT_TRUE(std::holds_alternative<proto::ErrorMessage>(message));
  EXPECT_EQ(std::get<proto::ErrorMessage>(message).status, Status::version_mismatch);
}

TEST(Ferryd, MalformedHeaderClosesOnlyThatClient) {
  FerrydProcess server;
  TestClient good(server.port(), "good");
  good.authenticate(FerrydProcess::default_token);
  TestClient bad(server.port(), "bad");
  bad.authenticate(FerrydProcess::default_token);

  std::mt19937 random(42);
  std::vector<std::byte> noise(200);
  for (auto& b : noise) b = static_cast<std::byte>(random());
  bad.send_raw(noise);
  const auto error = bad.next_as<proto::ErrorMessage>();
  EXPECT_EQ(error.status, Status::malformed);
  EXPECT_FALSE(error.message.empty());
  EXPECT_TRUE(bad.wait_closed());
  EXPECT_TRUE(server.wait_for_log("closing the connection from")) << server.log();

  good.send(proto::Ping{3});
  EXPECT_EQ(good.next_as<proto::Pong>().request, 3u);
  const float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(good.put(1, proto::DType::f32, 1, 4, x, sizeof x).status, Status::ok);
}

TEST(Ferryd, OversizedPayloadIsMalformed) {
  FerrydProcess server;
  std::vector<std::byte> data;  // before the client: UCX may read it until the connection is gone
  TestClient client(server.port());
  const auto welcome = client.authenticate(FerrydProcess::default_token);
  const std::uint64_t n = welcome.max_payload + 8;
  data.resize(n);
  client.send_async(proto::Put{1, 1, proto::DType::u8, 1, n, 0}, data.data(), data.size());
  EXPECT_EQ(client.next_as<proto::ErrorMessage>().status, Status::malformed);
  EXPECT_TRUE(client.wait_closed());
}

TEST(FerrydCommandLine, BadCommandLinesExitWithTwo) {
  const auto dir = make_temp_dir();
  const auto token = (dir / "token").string();
  std::ofstream(token) << "a token long enough to be accepted\n";
  chmod(token.c_str(), 0600);
  const auto empty = (dir / "empty").string();
  std::ofstream(empty).flush();
  std::string out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0"}, &out), 2) << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
  EXPECT_NE(out.find("--authorized-keys"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", (dir / "none").string()}, &out), 2);
  EXPECT_NE(out.find("none"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", empty}, &out), 2);
  EXPECT_NE(out.find("empty"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1", "--token-file", token}, &out), 2);
  EXPECT_NE(out.find("port"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", token, "--client-quota", "lots"},
                                       &out),
            2);
  EXPECT_NE(out.find("lots"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// FERRYD_<OPTION> for every option (how the Kubernetes base sets its
// values, so an overlay can change one by name); the command line wins.
TEST(FerrydCommandLine, OptionsComeFromTheEnvironmentTooAndTheCommandLineWins) {
  struct Unset {
    ~Unset() {
      for (const char* name : {"FERRYD_CLIENT_QUOTA", "FERRYD_MEMORY_LIMIT", "FERRYD_WORKERS"}) unsetenv(name);
    }
  } unset;
  const auto dir = make_temp_dir();
  const auto token = (dir / "token").string();
  std::ofstream(token) << "a token long enough to be accepted\n";
  chmod(token.c_str(), 0600);
  setenv("FERRYD_CLIENT_QUOTA", "lots", 1);
  std::string out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", token}, &out), 2) << out;
  EXPECT_NE(out.find("lots"), std::string::npos) << out;
  setenv("FERRYD_CLIENT_QUOTA", "512MiB", 1);
  setenv("FERRYD_MEMORY_LIMIT", "1GiB", 1);
  setenv("FERRYD_WORKERS", "1", 1);  // FerrydProcess passes --workers 2, which wins
  FerrydProcess server;
  ASSERT_TRUE(server.wait_for_log("client quota")) << server.log();
  EXPECT_NE(server.log().find("2 CPU workers; client quota 512.0 MiB, memory limit 1.00 GiB"), std::string::npos)
      << server.log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::test
