// ferryd's operator port: /metrics, /healthz, /readyz; idle, half-sent and
// slow connections that keep no scrape out; a restart that takes the port
// at once; client labels that clients cannot grow.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "ferry/transport/identity.hpp"
#include "ferryd_process.hpp"
#include "metrics_port.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Mode;
using proto::Status;

// A request that never finishes: the request line and half a header.
int half_sent_request(std::uint16_t port) {
  const int fd = connect_to(port);
  const std::string part = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  if (write(fd, part.data(), part.size()) != static_cast<ssize_t>(part.size())) throw std::runtime_error("write failed");
  return fd;
}

TEST(FerrydMetrics, HealthzAndReadyzAnswer) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  const std::string health = http_get(port, "/healthz");
  EXPECT_NE(health.find("200 OK"), std::string::npos) << health;
  const std::string ready = http_get(port, "/readyz");
  EXPECT_NE(ready.find("200 OK"), std::string::npos) << ready;
  EXPECT_NE(http_get(port, "/elsewhere").find("404"), std::string::npos);
}

// A CPU-only ferryd has no GPU to lose: a task that fails (which makes
// ferryd look at its devices again) leaves it ready and live, its device up.
// Losing a GPU: ferryd_gpu_test's AStickyErrorTakesTheGpuOutOfService.
TEST(FerrydMetrics, ACpuOnlyHostStaysReadyAndLiveWhenATaskFails) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  const double not_positive_definite[4] = {1, 2, 2, 1};
  ASSERT_EQ(client.put(1, proto::DType::f64, 2, 2, not_positive_definite, sizeof not_positive_definite).status,
            Status::ok);
  ASSERT_EQ(client.run("potrf", {TestClient::buffer(1, Mode::readwrite)}).status, Status::kernel_failed);
  const std::string ready = http_get(port, "/readyz");
  EXPECT_NE(ready.find("200 OK"), std::string::npos) << ready;
  const std::string live = http_get(port, "/healthz");
  EXPECT_NE(live.find("200 OK"), std::string::npos) << live;
  const std::string body = http_get(port, "/metrics");
  EXPECT_NE(body.find("\nferry_device_up{device=\"cpu\"} 1"), std::string::npos) << body;
  EXPECT_EQ(body.find("ferry_device_up{device=\"cuda"), std::string::npos) << body;
  EXPECT_EQ(server.log().find("is down after a CUDA error"), std::string::npos) << server.log();
}

// What a session freed goes back to the system once the sessions have been
// quiet for a second (HeapTrim): a long-lived ferryd serving short sessions
// kept the pages glibc held after each (bench/README.md, the soak). None
// before any session ended; one after. The wait is for a count, bounded.
TEST(FerrydMetrics, TheHeapIsTrimmedAfterASessionEnds) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  const auto trims = [&] { return metric_value(scrape_metrics(port), "ferry_heap_trims_total"); };
  ASSERT_EQ(trims(), 0.0) << scrape_metrics(port);
  {
    TestClient client(server.port());
    client.authenticate(FerrydProcess::default_token);
    std::vector<float> x(1 << 16, 1.0f);
    ASSERT_EQ(client.put(1, proto::DType::f32, 1, x.size(), x.data(), x.size() * sizeof(float)).status, Status::ok);
    ASSERT_EQ(client.run("sum", {TestClient::buffer(1, Mode::read)}).status, Status::ok);
    EXPECT_EQ(trims(), 0.0) << "trimmed while the session was on";
  }
  std::optional<double> after;
  for (int i = 0; i < 100 && (after = trims()).value_or(0) < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(after, 1.0) << scrape_metrics(port);
}

TEST(FerrydMetrics, PortOnlyMeansLoopback) {
  const auto port = stable_port();
  FerrydProcess server({"--metrics", ":" + std::to_string(port)});
  EXPECT_EQ(metrics_port(server), port) << server.log();
}

TEST(FerrydMetrics, AHalfSentRequestDoesNotBlockAScrape) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  const int stalled[2] = {half_sent_request(port), half_sent_request(port)};
  // Well below the old single thread's 30 s request timeout.
  const std::string body = http_get(port, "/metrics", std::chrono::seconds(4));
  EXPECT_NE(body.find("200 OK"), std::string::npos) << "a scrape waited behind a half-sent request: '" << body << "'";
  for (int fd : stalled) close(fd);
}

TEST(FerrydMetrics, ARestartAtOnceTakesTheSamePort) {
  const auto port = stable_port();
  const std::vector<std::string> args{"--metrics", "127.0.0.1:" + std::to_string(port)};
  FerrydProcess first(args);
  ASSERT_EQ(metrics_port(first), port);
  ASSERT_NE(http_get(port, "/metrics").find("200 OK"), std::string::npos);
  const int stalled = half_sent_request(port);  // a connection still open at shutdown
  first.signal(SIGTERM);
  // Started at once, while the first may still be letting go of the port.
  FerrydProcess second(args);
  EXPECT_EQ(metrics_port(second), port) << second.log();
  EXPECT_NE(http_get(port, "/healthz").find("200 OK"), std::string::npos) << second.log();
  EXPECT_EQ(first.wait_exit(std::chrono::seconds(30)), 0) << first.log();
  close(stalled);
}

// --drain-seconds: after SIGTERM /readyz answers 503 (so a Service stops
// sending clients) while /healthz stays 200 and the clients already there,
// and new ones that still arrive, are served; then ferryd stops cleanly.
TEST(FerrydMetrics, ADrainAnswersReadyz503WhileClientsAreStillServed) {
  FerrydProcess server({"--metrics", "127.0.0.1:0", "--drain-seconds", "4"});
  const auto port = metrics_port(server);
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  ASSERT_NE(http_get(port, "/readyz").find("200 OK"), std::string::npos);
  server.signal(SIGTERM);
  ASSERT_TRUE(server.wait_for_log("draining")) << server.log();
  const std::string ready = http_get(port, "/readyz");
  EXPECT_NE(ready.find("503"), std::string::npos) << ready;
  EXPECT_NE(ready.find("shutting down"), std::string::npos) << ready;
  EXPECT_NE(http_get(port, "/healthz").find("200 OK"), std::string::npos);
  const double values[4] = {1, 2, 3, 4};
  EXPECT_EQ(client.put(1, proto::DType::f64, 2, 2, values, sizeof values).status, Status::ok) << server.log();
  EXPECT_EQ(client.run("scal", {TestClient::buffer(1, Mode::readwrite), TestClient::real(2.0)}).status,
            Status::ok)
      << server.log();
  TestClient late(server.port());
  EXPECT_NO_THROW(late.authenticate(FerrydProcess::default_token)) << server.log();
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
  // The drain came first: the clients were told only after it.
  const std::string log = server.log();
  EXPECT_LT(log.find("draining"), log.find("clients told")) << log;
}

TEST(FerrydMetrics, ASecondSigtermEndsTheDrain) {
  FerrydProcess server({"--metrics", "127.0.0.1:0", "--drain-seconds", "600"});
  server.signal(SIGTERM);
  ASSERT_TRUE(server.wait_for_log("draining")) << server.log();
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(60)), 0) << server.log();
  EXPECT_NE(server.log().find("received while draining, stopping now"), std::string::npos) << server.log();
}

// Whether NVIDIA's management library loads here, as ferryd would load it.
bool host_has_nvml() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (nvml == nullptr) return false;
  dlclose(nvml);
  return true;
}

// GPU gauges come from NVML: without it (no NVIDIA driver) ferryd starts,
// says so, and exports no GPU series rather than zeros that read as idle GPUs.
TEST(FerrydMetrics, GpuSeriesExistOnlyWhereNvmlAnswers) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  const std::string body = http_get(port, "/metrics");
  ASSERT_NE(body.find("200 OK"), std::string::npos) << body;
  if (host_has_nvml()) {
    EXPECT_NE(body.find("\nferry_nvml_available 1"), std::string::npos) << body;
    return;
  }
  EXPECT_NE(body.find("\nferry_nvml_available 0"), std::string::npos) << body;
  EXPECT_EQ(body.find("\nferry_gpu_"), std::string::npos) << "GPU series without NVML:\n" << body;
  EXPECT_TRUE(server.wait_for_log("NVML unavailable")) << server.log();
}

// Every metric docs/deployment.md lists (its "ferry_..." names) is in a scrape.
TEST(FerrydMetrics, EveryDocumentedMetricIsScraped) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  TestClient client(server.port());
  client.authenticate(FerrydProcess::default_token);
  const float x[3] = {1, 2, 3};
  ASSERT_EQ(client.put(1, proto::DType::f32, 1, 3, x, sizeof x).status, Status::ok);
  ASSERT_EQ(client.run("sum", {TestClient::buffer(1, Mode::read)}).status, Status::ok);
  ASSERT_EQ(client.get(1, 0, sizeof x).size(), sizeof x);
  const std::string body = http_get(port, "/metrics");

  std::ifstream docs(FERRY_SOURCE_DIR "/docs/deployment.md");
  std::stringstream text;
  text << docs.rdbuf();
  const std::string doc = text.str();
  std::set<std::string> names;
  const std::regex metric(R"(`(ferry_[a-z_]+)[`{])");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), metric); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  EXPECT_GE(names.size(), 15u) << "docs/deployment.md lists fewer metrics than ferryd has";
  // GPU gauges exist only where NVML answers (GpuSeriesExistOnlyWhereNvmlAnswers).
  const bool gpu_series = body.find("\nferry_nvml_available 1") != std::string::npos;
  for (const std::string& name : names) {
    if (name.starts_with("ferry_gpu_") && !gpu_series) continue;
    EXPECT_TRUE(std::regex_search(body, std::regex("(\\n|# TYPE )" + name + "(_bucket|_sum|_count)?[ {]")))
        << name << " is documented but not scraped\n" << body;
  }
  EXPECT_NE(body.find("ferry_kernel_tasks_total{kernel=\"sum\",status=\"ok\"} 1"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_transfer_bytes_count{direction=\"in\"} 1"), std::string::npos) << body;
}

// Connections that send nothing take no serving thread from a scrape:
// today's 4 threads with a 5 s deadline each served 64 idle sockets for
// 80 s before the scrape's turn; 8 s of patience is 10 times the need.
TEST(FerrydMetrics, SixtyFourIdleConnectionsDoNotBlockAScrape) {
  FerrydProcess server({"--metrics", "127.0.0.1:0"});
  const auto port = metrics_port(server);
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(connect_to(port));
  const std::string body = http_get(port, "/metrics", std::chrono::seconds(8));
  EXPECT_NE(body.find("200 OK"), std::string::npos) << "a scrape waited behind 64 idle connections: '" << body << "'";
  EXPECT_NE(body.find("ferry_clients"), std::string::npos) << body;
  EXPECT_NE(http_get(port, "/healthz", std::chrono::seconds(8)).find("200 OK"), std::string::npos);
  for (int fd : idle) close(fd);
}

// The distinct values of `label` in `family`'s series.
std::set<std::string> label_values(const std::string& body, const std::string& family, const std::string& label) {
  std::set<std::string> values;
  const std::regex series("\\n" + family + "\\{[^}]*" + label + "=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), series); it != std::sregex_iterator(); ++it)
    values.insert((*it)[1]);
  return values;
}

// Client labels are bounded: a keyed client is its key's name (the
// operator's choice), a token client "token:" and the host it names, at
// most Metrics::max_client_labels (32) such hosts, the rest "token:other".
// A tenant choosing many names can neither grow the series nor push
// another tenant's series into "other".
TEST(FerrydMetrics, ClientLabelsAreBoundedAndATenantsNamesTakeNoOneElsesLabel) {
  const auto dir = make_temp_dir();
  const auto alice = transport::KeyPair::generate(), bob = transport::KeyPair::generate();
  std::ofstream(dir / "authorized_keys") << transport::public_key_line(alice.public_key(), "alice") << '\n'
                                         << transport::public_key_line(bob.public_key(), "bob") << '\n';
  FerrydProcess server({"--metrics", "127.0.0.1:0", "--authorized-keys", (dir / "authorized_keys").string()});
  const auto port = metrics_port(server);
  const std::byte one{1};
  const auto put_as = [&](const std::string& name, std::optional<transport::KeyPair> key) {
    TestClient client(server.port(), name);
    transport::DialOptions options;
    if (key) options.identity = std::move(key);
    else options.token = FerrydProcess::default_token;
    client.connect(std::move(options));
    ASSERT_EQ(client.put(1, proto::DType::u8, 1, 1, &one, 1).status, Status::ok);
  };
  for (int i = 0; i < 40; ++i) put_as("alice-host-" + std::to_string(i) + ":1", alice);
  for (int i = 0; i < 40; ++i) put_as("guest-" + std::to_string(i) + ":1", std::nullopt);
  put_as("bobs-laptop:1", bob);

  const std::string body = http_get(port, "/metrics");
  ASSERT_NE(body.find("200 OK"), std::string::npos) << body;
  const auto labels = label_values(body, "ferry_client_bytes_in_total", "client");
  EXPECT_TRUE(labels.contains("alice")) << "alice's 40 host names, one series";
  EXPECT_TRUE(labels.contains("bob")) << "bob's series went under another label";
  EXPECT_TRUE(labels.contains("token:other"));
  EXPECT_LE(labels.size(), 2u + 32u + 1u) << "client-chosen names grew the label set to " << labels.size();
  EXPECT_EQ(label_values(body, "ferry_client_bytes_in_total", "client").count("alice-host-0"), 0u);
  std::filesystem::remove_all(dir);
}

// A client's series exist in the families that counted something for it,
// and in no other: a token client on host "vm" that only shipped data has
// no ferry_client_tasks_total{client="token:vm"} 0 beside the key "vm"'s
// tasks, and no client has a counter at 0.
TEST(FerrydMetrics, NoClientSeriesIsAZeroBesideAnother) {
  const auto dir = make_temp_dir();
  const auto vm = transport::KeyPair::generate();
  std::ofstream(dir / "authorized_keys") << transport::public_key_line(vm.public_key(), "vm") << '\n';
  FerrydProcess server({"--metrics", "127.0.0.1:0", "--authorized-keys", (dir / "authorized_keys").string()});
  const auto port = metrics_port(server);
  const float x[3] = {1, 2, 3};
  {
    TestClient keyed(server.port(), "vm:1");
    transport::DialOptions options;
    options.identity = vm;
    keyed.connect(std::move(options));
    ASSERT_EQ(keyed.put(1, proto::DType::f32, 1, 3, x, sizeof x).status, Status::ok);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(keyed.run("sum", {TestClient::buffer(1, Mode::read)}).status, Status::ok);
  }
  {
    TestClient token(server.port(), "vm:2");
    token.authenticate(FerrydProcess::default_token);
    ASSERT_EQ(token.put(1, proto::DType::f32, 1, 3, x, sizeof x).status, Status::ok);
  }
  const std::string body = http_get(port, "/metrics");
  ASSERT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("\nferry_client_tasks_total{client=\"vm\"} 3"), std::string::npos) << body;
  EXPECT_NE(body.find("\nferry_client_bytes_in_total{client=\"token:vm\"} 12"), std::string::npos) << body;
  EXPECT_EQ(label_values(body, "ferry_client_tasks_total", "client").count("token:vm"), 0u)
      << "a client that ran nothing has a tasks series\n" << body;
  // Neither fetched anything.
  EXPECT_TRUE(label_values(body, "ferry_client_bytes_out_total", "client").empty()) << body;
  const std::regex zero_counter("\\n(ferry_client_[a-z_]+_total\\{[^}]*\\}) 0\\n");
  std::smatch found;
  EXPECT_FALSE(std::regex_search(body, found, zero_counter)) << found[1] << " is a zero series\n" << body;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::test
