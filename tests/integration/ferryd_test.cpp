// ferryd as a client sees it: the handshake, refusals, and what a
// misbehaving client gets (while everyone else keeps being served).
#include <thread>
#include <gtest/gtest.h>

#include <random>

#include "ferryd_process.hpp"
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

TEST(Ferryd, BadTokenIsRefusedAndLogged) {
  FerrydProcess server;
  TestClient client(server.port(), "intruder");
  const auto answer = client.handshake("not the token");
  auto* error = std::get_if<proto::ErrorMessage>(&answer.message);
  ASSERT_NE(error, nullptr) << proto::to_string(proto::type_of(answer.message));
  EXPECT_EQ(error->status, Status::auth_failed);
  EXPECT_TRUE(client.wait_closed());
  EXPECT_TRUE(server.wait_for_log("failed to authenticate")) << server.log();
  EXPECT_NE(server.log().find("intruder"), std::string::npos) << server.log();
}

TEST(Ferryd, RunBeforeAuthIsOutOfOrder) {
  FerrydProcess server;
  TestClient client(server.port());
  client.send(proto::Hello{proto::oldest_version, proto::version, "eager"});
  client.next_as<proto::Challenge>();
  client.send(proto::Run{1, "dot", "too soon", {}});
  const auto error = client.next_as<proto::ErrorMessage>();
  EXPECT_EQ(error.status, Status::out_of_order) << error.message;
  EXPECT_TRUE(client.wait_closed());
}

TEST(Ferryd, SilentClientIsDroppedAfterTheHandshakeTimeout) {
  FerrydProcess server({"--handshake-timeout", "0.5"});
  TestClient silent(server.port(), "silent");
  TestClient prompt(server.port());
  prompt.authenticate(FerrydProcess::default_token);
  EXPECT_TRUE(silent.wait_closed(std::chrono::seconds(10))) << "a client that never said hello was kept";
  EXPECT_TRUE(server.wait_for_log("no authentication within")) << server.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  prompt.send(proto::Ping{3});  // an authenticated client is not subject to it
  EXPECT_EQ(prompt.next_as<proto::Pong>().request, 3u);
}

TEST(Ferryd, VersionWithNothingInCommonIsRefused) {
  FerrydProcess server;
  TestClient client(server.port());
  client.send(proto::Hello{proto::version + 1, proto::version + 5, "future"});
  EXPECT_EQ(client.next_as<proto::ErrorMessage>().status, Status::version_mismatch);
  EXPECT_TRUE(client.wait_closed());
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

}  // namespace
}  // namespace ferry::test
