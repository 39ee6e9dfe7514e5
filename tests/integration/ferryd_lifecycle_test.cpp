// ferryd's life around the protocol: a clean stop on SIGTERM with work in
// flight, and the Prometheus endpoint.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <regex>
#include <string>

#include "ferryd_process.hpp"
#include "metrics_port.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Mode;
using proto::Status;

// Buffers 1, 2 and 3 (a, b, c), each n x n doubles, for gemms on c that
// take a moment each here.
constexpr std::uint64_t gemm_n = 1500;
constexpr std::uint64_t gemm_bytes = gemm_n * gemm_n * sizeof(double);

void put_gemm_operands(TestClient& client) {
  std::vector<double> matrix(gemm_n * gemm_n, 0.001);
  for (std::uint64_t id : {1, 2, 3})
    client.put_all(id, proto::DType::f64, gemm_n, gemm_n, matrix.data(), gemm_bytes, 16u << 20);
}

// c += a b, as request `request`.
proto::Run gemm_on_c(std::uint64_t request) {
  return proto::Run{request,
                    "gemm",
                    "chain",
                    {TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::read),
                     TestClient::buffer(3, Mode::readwrite), TestClient::real(1.0), TestClient::real(1.0)}};
}

TEST(FerrydLifecycle, SigtermAnswersRunsInFlightThenSaysBye) {
  FerrydProcess server;
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  put_gemm_operands(client);
  // A chain on c: each gemm waits for the one before, so most are still queued when the signal comes.
  constexpr int runs = 4;
  std::vector<std::uint64_t> requests;
  for (int i = 0; i < runs; ++i) {
    requests.push_back(client.next_request());
    client.send(gemm_on_c(requests.back()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.signal(SIGTERM);

  int answered = 0;
  for (;;) {
    Received r = client.next(std::chrono::seconds(30));
    if (auto* done = std::get_if<proto::Done>(&r.message)) {
      EXPECT_TRUE(done->status == Status::ok || done->status == Status::shutting_down)
          << proto::to_string(done->status) << " " << done->message;
      ++answered;
      continue;
    }
    auto* bye = std::get_if<proto::Bye>(&r.message);
    ASSERT_NE(bye, nullptr) << proto::to_string(proto::type_of(r.message));
    EXPECT_EQ(bye->status, Status::shutting_down);
    break;
  }
  EXPECT_EQ(answered, runs);
  EXPECT_TRUE(client.wait_closed());
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
  EXPECT_NE(server.log().find("shutting down"), std::string::npos) << server.log();
}

// SIGTERM while a reply's payload waits for a client that stopped answering
// (SIGSTOP), on bulk lanes, as a client on another host has them: neither
// the closes of the client's endpoints nor the rendezvous send can finish,
// and UCX 1.13 aborts a process whose worker is destroyed under either
// (ucp_ep.c:382 and 437). ferryd leaves that worker to its exit, names what
// did not finish, and exits with 0.
TEST(FerrydLifecycle, SigtermWithAPayloadOnItsWayToAStoppedClientExitsCleanly) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const std::uint16_t metrics = metrics_port(server);
  const pid_t child = ::fork();  // before this process has a thread: the child makes its own
  if (child == 0) {
    ::setenv("FERRY_SHARED_MEMORY", "0", 1);  // bulk lanes over loopback TCP
    TestClient client(server.port());
    client.authenticate(FerrydProcess::default_token);
    // The get waits for a gemm that writes c, so the reply leaves only once
    // this process has stopped: its rendezvous cannot complete.
    put_gemm_operands(client);
    client.send(gemm_on_c(client.next_request()));
    client.send(proto::Get{client.next_request(), 3, 0, gemm_bytes});
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
  const bool stopped = WIFSTOPPED(status);
  // The reply's payload is counted as its send starts; SIGTERM once it has
  // (before it, ferryd would end with nothing on its way).
  bool replying = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (stopped && !replying && std::chrono::steady_clock::now() < deadline) {
    replying = metric_value(scrape_metrics(metrics), "ferry_bytes_out_total").value_or(0) >= double{gemm_bytes};
    if (!replying) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (replying) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the send starts on the progress thread
    server.signal(SIGTERM);
  }
  const int exit = replying ? server.wait_exit(std::chrono::seconds(30)) : -1;
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(stopped) << "the client did not get to its stop";
  ASSERT_TRUE(replying) << "ferryd did not start its reply\n" << server.log();
  EXPECT_EQ(exit, 0) << server.log();
  EXPECT_NE(server.log().find("1 payload send(s) did not finish"), std::string::npos) << server.log();
}

std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Clients that end as programs do (`ferry check`: a runtime that says bye,
// closes and exits at once) leave "said bye" in ferryd's log, one each,
// and nothing alarming: no "went away" (the bye still waited on the
// shared-memory lane when the control endpoint saw the process gone) and
// no raw UCX "error during flush: Endpoint timeout" (the lane's flush once
// its peer had left). About one client in three did either before.
TEST(FerrydLifecycle, ClientsThatExitAfterByeSaidByeAndNothingAlarming) {
  FerrydProcess server;
  constexpr int clients = 12;
  for (int i = 0; i < clients; ++i) {
    const std::string command = "env FERRY_TOKEN_FILE=" + server.token_file().string() + " " +
                                std::string(FERRY_CLI_PATH) + " check 127.0.0.1:" + std::to_string(server.port()) +
                                " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char chunk[4096];
    while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
    ASSERT_EQ(::pclose(pipe), 0) << output;
  }
  // Every session ended one way or the other before the log is judged.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string log = server.log();
  while (occurrences(log, " said bye") + occurrences(log, " went away") < clients &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = server.log();
  }
  server.signal(SIGTERM);
  ASSERT_EQ(server.wait_exit(std::chrono::seconds(20)), 0) << server.log();
  log = server.log();
  ASSERT_EQ(occurrences(log, "shared-memory lane)"), static_cast<std::size_t>(clients)) << "the case is the lane's\n"
                                                                                         << log;
  EXPECT_EQ(occurrences(log, " said bye"), static_cast<std::size_t>(clients)) << log;
  EXPECT_EQ(log.find("went away"), std::string::npos) << log;
  EXPECT_EQ(log.find("error during flush"), std::string::npos) << log;
  EXPECT_EQ(log.find("UCX  ERROR"), std::string::npos) << log;
}

TEST(FerrydLifecycle, MetricsAreServedOverHttp) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(server.wait_for_log("metrics on http://")) << server.log();
  std::smatch match;
  const std::string log = server.log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)"))) << log;
  const auto port = static_cast<std::uint16_t>(std::stoi(match[1]));

  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  const float x[3] = {1, 2, 3};
  ASSERT_EQ(client.put(1, proto::DType::f32, 1, 3, x, sizeof x).status, Status::ok);
  ASSERT_EQ(client.run("sum", {TestClient::buffer(1, Mode::read)}).status, Status::ok);

  const std::string body = http_get(port, "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_tasks_total 1"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_bytes_in_total 12"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_clients 1"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_memory_in_use_bytes 12"), std::string::npos) << body;
  // The replica lives in the pool: it has mapped at least a slab for it.
  ASSERT_TRUE(std::regex_search(body, match, std::regex(R"(\nferry_pool_bytes (\d+))"))) << body;
  EXPECT_GE(std::stod(match[1]), 64.0 * 1024 * 1024) << body;
}

}  // namespace
}  // namespace ferry::test
