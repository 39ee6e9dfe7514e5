// What a runtime does when a named GPU host cannot be used: errors that
// name the host and the reason under RemotePolicy::require, one warning
// under prefer; a host's kernel list keeps tasks off hosts that lack them.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ferry/ferry.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/identity.hpp"
#include "ferryd_process.hpp"
#include "metrics_port.hpp"

namespace {

using ferry::test::FerrydProcess;

ferry::Runtime::Options options_for(const std::string& address, const std::string& token,
                                    ferry::RemotePolicy policy = ferry::RemotePolicy::require) {
  ferry::Runtime::Options o;
  o.workers = 1;
  o.gpus = "none";
  o.persist_perf_models = false;
  o.read_environment = false;
  o.remotes = {address};
  o.token = token;
  o.remote_policy = policy;
  o.remote_timeout = std::chrono::milliseconds(2000);
  return o;
}

// Everything the runtime logs while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) { ferry::log().sinks().push_back(sink_); }
  ~LogCapture() { std::erase(ferry::log().sinks(), sink_); }
  std::string text() {
    ferry::log().flush();
    return text_.str();
  }
  std::size_t count(const std::string& needle) {
    const std::string all = text();
    std::size_t n = 0;
    for (std::size_t at = all.find(needle); at != std::string::npos; at = all.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ferry::Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// `ferry check` as an operator runs it; `env`: VAR=value words to run it with.
int run_cli(const std::string& args, std::string& output, const std::string& env = "") {
  const std::string command = (env.empty() ? "" : "env " + env + " ") + std::string(FERRY_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RemotePolicy, WrongTokenThrowsUnderRequireNamingTheHostAndTheReason) {
  FerrydProcess server({}, "the-right-token-for-this-host");
  const std::string what = message_of([&] { ferry::Runtime rt(options_for(server.address(), "a-wrong-token")); });
  EXPECT_NE(what.find(server.address()), std::string::npos) << what;
  EXPECT_NE(what.find("auth_failed"), std::string::npos) << what;
  EXPECT_THROW(ferry::Runtime rt(options_for(server.address(), "a-wrong-token")), ferry::RemoteError);
}

// A refusal is a security answer: the error says why, and does not suggest
// FERRY_REMOTE_POLICY=prefer to run without the host (which it did).
TEST(RemotePolicy, ASecurityRefusalDoesNotSuggestGoingAroundIt) {
  const auto dir = ferry::test::make_temp_dir();
  FerrydProcess server({"--host-key", (dir / "host_key").string()}, "the-right-token-for-this-host");
  const std::string wrong_token =
      message_of([&] { ferry::Runtime rt(options_for(server.address(), "a-wrong-token")); });
  EXPECT_NE(wrong_token.find("auth_failed"), std::string::npos) << wrong_token;
  EXPECT_EQ(wrong_token.find("FERRY_REMOTE_POLICY"), std::string::npos) << wrong_token;

  std::ofstream(dir / "known_hosts").flush();
  auto o = options_for(server.address(), "the-right-token-for-this-host");
  o.known_hosts = dir / "known_hosts";
  o.strict_host_keys = true;
  const std::string unpinned = message_of([&] { ferry::Runtime rt(o); });
  EXPECT_NE(unpinned.find("does not pin"), std::string::npos) << unpinned;
  EXPECT_EQ(unpinned.find("FERRY_REMOTE_POLICY"), std::string::npos) << unpinned;
  std::filesystem::remove_all(dir);
}

TEST(RemotePolicy, WrongTokenWarnsOnceUnderPreferAndIsNotRetried) {
  FerrydProcess server({}, "the-right-token-for-this-host");
  LogCapture logs;
  {
    ferry::Runtime rt(options_for(server.address(), "a-wrong-token", ferry::RemotePolicy::prefer));
    auto x = rt.buffer<double>(16);
    rt.submit("fill", ferry::write(x), 1.0).wait();  // on the CPU: the host refused us
    EXPECT_EQ(x.host()[0], 1.0);
    // Longer than the first reconnect backoff: a retry would show in ferryd's log.
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    EXPECT_NE(rt.describe().find("down: "), std::string::npos) << rt.describe();
    EXPECT_FALSE(rt.remote_stats(server.address()).connected);
  }
  EXPECT_EQ(logs.count("refused this client"), 1u) << logs.text();
  const std::string log = server.log();
  std::size_t failures = 0;
  for (std::size_t at = log.find("bootstrap: refused"); at != std::string::npos;
       at = log.find("bootstrap: refused", at + 1))
    ++failures;
  EXPECT_EQ(failures, 1u) << "a refused client must not retry\n" << log;
}

TEST(RemotePolicy, MalformedAddressThrowsUnderRequireAndWarnsOnceUnderPrefer) {
  const std::string what =
      message_of([] { ferry::Runtime rt(options_for("http://127.0.0.1:7070", "token")); });
  EXPECT_NE(what.find("http://127.0.0.1:7070"), std::string::npos) << what;
  EXPECT_NE(what.find("'http://'"), std::string::npos) << what;
  EXPECT_THROW(ferry::Runtime rt(options_for("127.0.0.1", "token")), ferry::UsageError);

  LogCapture logs;
  ferry::Runtime rt(options_for("http://127.0.0.1:7070", "token", ferry::RemotePolicy::prefer));
  auto x = rt.buffer<double>(4);
  rt.submit("fill", ferry::write(x), 2.0).wait();
  EXPECT_EQ(x.host()[3], 2.0);
  EXPECT_EQ(logs.count("http://127.0.0.1:7070"), 1u) << logs.text();
}

// Keeps a port bound, not listening, so a dial to it is refused and no other
// test's ferryd (ctest runs two at once) starts on it meanwhile.
class HeldPort {
 public:
  explicit HeldPort(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~HeldPort() { ::close(fd_); }
  bool bound() const { return bound_; }

 private:
  int fd_;
  bool bound_ = false;
};

TEST(RemotePolicy, UnreachableHostThrowsUnderRequireAfterTheTimeoutAndIsDownUnderPrefer) {
  std::string address;
  {
    FerrydProcess server;
    address = server.address();
    server.stop(SIGKILL);
  }
  const HeldPort held(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  ASSERT_TRUE(held.bound()) << "another process took " << address << " as soon as ferryd died";
  auto o = options_for(address, FerrydProcess::default_token);
  o.remote_timeout = std::chrono::milliseconds(600);
  const std::string what = message_of([&] { ferry::Runtime rt(o); });
  EXPECT_NE(what.find(address), std::string::npos) << what;
  EXPECT_NE(what.find("cannot be used"), std::string::npos) << what;
  // A refused port is retried (a ferryd starting up refuses it a moment), and the error says so.
  EXPECT_NE(what.find("tried "), std::string::npos) << what;

  LogCapture logs;
  ferry::Runtime rt(options_for(address, FerrydProcess::default_token, ferry::RemotePolicy::prefer));
  EXPECT_NE(rt.describe().find("remote:" + address + " (down: "), std::string::npos) << rt.describe();
  EXPECT_EQ(logs.count("cannot be reached"), 1u) << logs.text();
}

// Handshakes ferryd saw fail, whatever the reason (ferry_auth_failures_total),
// once at least one has: a client that gave up has stopped trying by then.
double handshake_failures(const FerrydProcess& server) {
  const auto port = ferry::test::metrics_port(server);
  for (int attempt = 0;; ++attempt) {
    double total = 0;
    const std::string text = ferry::test::scrape_metrics(port);
    for (const char* reason : {"wrong_token", "unknown_key", "handshake_timeout", "version_mismatch", "hung_up", "malformed"})
      total += ferry::test::metric_value(text, std::string("ferry_auth_failures_total{reason=\"") + reason + "\"}")
                   .value_or(0);
    if (total > 0 || attempt == 200) return total;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The public line ferryd wrote beside its --host-key.
std::string public_line(const std::filesystem::path& host_key) {
  std::string line;
  std::getline(std::ifstream(host_key.string() + ".pub"), line);
  return line;
}

// A host key that is not the pinned one is the same key on the next try:
// refused at once (one failed handshake at ferryd, not one per retry until
// the timeout), naming the mismatch.
TEST(RemotePolicy, AHostKeyMismatchIsRefusedAtOnceNamingIt) {
  const auto dir = ferry::test::make_temp_dir();
  FerrydProcess server({"--host-key", (dir / "host_key").string(), "--metrics", "127.0.0.1:0"});
  std::ofstream(dir / "known_hosts") << server.address() << ' '
                                     << ferry::transport::public_key_line(
                                            ferry::transport::KeyPair::generate().public_key(), "")
                                     << '\n';
  auto o = options_for(server.address(), FerrydProcess::default_token);
  o.known_hosts = dir / "known_hosts";
  o.remote_timeout = std::chrono::milliseconds(10000);
  const std::string what = message_of([&] { ferry::Runtime rt(o); });
  EXPECT_NE(what.find(server.address()), std::string::npos) << what;
  EXPECT_NE(what.find("pins"), std::string::npos) << what;
  EXPECT_EQ(what.find("tried "), std::string::npos) << "a mismatch was retried: " << what;
  EXPECT_EQ(handshake_failures(server), 1) << server.log();
  std::filesystem::remove_all(dir);
}

// A name that resolves to nothing is final too: no retries, the name in the error.
TEST(RemotePolicy, AnUnresolvableNameFailsWithoutRetrying) {
  auto o = options_for("no-such-host.invalid:7300", FerrydProcess::default_token);
  o.remote_timeout = std::chrono::milliseconds(10000);
  const std::string what = message_of([&] { ferry::Runtime rt(o); });
  EXPECT_NE(what.find("no-such-host.invalid"), std::string::npos) << what;
  EXPECT_NE(what.find("cannot resolve"), std::string::npos) << what;
  EXPECT_EQ(what.find("tried "), std::string::npos) << "an unresolvable name was retried: " << what;
}

// ferryd --host-key FILE writes FILE.pub (mode 644), the line an operator
// pins the server with before any client meets it.
TEST(FerrydHostKey, PublicLineIsWrittenAndPinsTheServerForStrictClients) {
  const auto dir = ferry::test::make_temp_dir();
  const auto host_key = dir / "host_key";
  FerrydProcess server({"--host-key", host_key.string()});
  const std::string line = public_line(host_key);
  EXPECT_EQ(ferry::transport::parse_public_key(line), ferry::transport::KeyPair::read(host_key).public_key()) << line;
  EXPECT_EQ(std::filesystem::status(host_key.string() + ".pub").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                std::filesystem::perms::group_read | std::filesystem::perms::others_read);

  std::ofstream(dir / "known_hosts") << server.address() << ' ' << line << '\n';
  auto o = options_for(server.address(), FerrydProcess::default_token);
  o.known_hosts = dir / "known_hosts";
  o.strict_host_keys = true;
  ferry::Runtime rt(o);
  EXPECT_TRUE(rt.remote_stats(server.address()).connected);
  EXPECT_FALSE(rt.remote_stats(server.address()).cipher.empty());

  // A restart with the same key leaves the file as it is.
  server.stop(SIGTERM);
  server.restart();
  EXPECT_EQ(public_line(host_key), line);
  std::filesystem::remove_all(dir);
}

// A .pub that holds another key than --host-key's (replaced by hand) stops
// ferryd with both named, rather than be overwritten behind the operator's back.
TEST(FerrydHostKey, APublicFileWithAnotherKeyStopsFerrydNamingIt) {
  const auto dir = ferry::test::make_temp_dir();
  const auto host_key = dir / "host_key";
  ferry::transport::KeyPair::generate().write(host_key);
  const std::string other =
      ferry::transport::public_key_line(ferry::transport::KeyPair::generate().public_key(), "old");
  std::ofstream(host_key.string() + ".pub") << other << '\n';
  std::ofstream(dir / "token") << FerrydProcess::default_token << '\n';
  std::filesystem::permissions(dir / "token", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::string output;
  EXPECT_NE(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", (dir / "token").string(), "--gpus", "none",
                                        "--host-key", host_key.string()},
                                       &output),
            0)
      << output;
  EXPECT_NE(output.find(host_key.string() + ".pub"), std::string::npos) << output;
  EXPECT_EQ(public_line(host_key), other);
  std::filesystem::remove_all(dir);
}

TEST(RemotePolicy, WelcomeListsTheHostsKernelsAndDevices) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(server.address(), FerrydProcess::default_token));
  const auto s = rt.remote_stats(server.address());
  EXPECT_TRUE(s.connected);
  EXPECT_NE(std::find(s.kernels.begin(), s.kernels.end(), "axpy"), s.kernels.end());
  EXPECT_NE(s.server.find("ferryd"), std::string::npos) << s.server;
  ASSERT_FALSE(s.server_devices.empty());
  EXPECT_NE(s.server_devices.front().find("cpu (2 workers)"), std::string::npos) << s.server_devices.front();
  EXPECT_EQ(rt.describe().find("down"), std::string::npos) << rt.describe();
}

TEST(RemotePolicy, AKernelTheHostLacksNeverGoesThereAndAPinnedTaskSaysWhy) {
  FerrydProcess server;  // started without the plugin
  LogCapture logs;
  ferry::Runtime rt(options_for(server.address(), FerrydProcess::default_token));
  rt.load_plugin(FERRY_TEST_PLUGIN);
  EXPECT_EQ(logs.count("lacks kernels this program has: test_plugin_iota"), 1u) << logs.text();
  auto x = rt.buffer<double>(8);
  const std::string what = message_of(
      [&] { rt.submit("test_plugin_iota", ferry::write(x), ferry::on(ferry::remote(server.address()))); });
  EXPECT_NE(what.find("no kernel 'test_plugin_iota'"), std::string::npos) << what;
  EXPECT_NE(what.find(server.address()), std::string::npos) << what;
  // Unpinned, it is never placed there.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rt.submit("test_plugin_iota", ferry::write(x)).device(), "cpu");
  EXPECT_EQ(x.host()[7], 7.0);
  EXPECT_EQ(rt.remote_stats(server.address()).server_tasks, 0u);
}

// The plugin path: a FERRY_KERNEL library loaded by both sides runs remotely.
TEST(RemotePolicy, ASamplePluginLoadedOnBothSidesRunsThere) {
  FerrydProcess server({"--plugin", FERRY_SAMPLE_PLUGIN});
  ferry::Runtime rt(options_for(server.address(), FerrydProcess::default_token));
  rt.load_plugin(FERRY_SAMPLE_PLUGIN);
  const auto kernels = rt.remote_stats(server.address()).kernels;
  EXPECT_NE(std::ranges::find(kernels, "clamp"), kernels.end());
  auto x = rt.buffer<double>(5);
  for (std::size_t i = 0; i < 5; ++i) x.host()[i] = static_cast<double>(i) - 2.0;
  auto t = rt.submit("clamp", ferry::readwrite(x), -1.0, 1.0, ferry::on(ferry::remote(server.address())));
  t.wait();
  EXPECT_EQ(t.device(), "remote:" + server.address());
  const auto h = x.host_read();
  EXPECT_EQ(std::vector<double>(h.begin(), h.end()), (std::vector<double>{-1, -1, 0, 1, 1}));
}

// Performance models follow what the host is, not its port: a ferryd
// restarted elsewhere (or an identical host) starts calibrated.
TEST(RemoteModels, PersistAcrossAPortChange) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-models-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string key;
  {
    FerrydProcess first;
    auto o = options_for(first.address(), FerrydProcess::default_token);
    o.persist_perf_models = true;
    o.perf_model_dir = dir;
    ferry::Runtime rt(o);
    auto x = rt.buffer<double>(4096);
    for (int i = 0; i < 5; ++i) rt.submit("sum", ferry::read(x), ferry::on(ferry::remote(first.address()))).wait();
    for (const auto& d : rt.devices())
      if (d.kind == ferry::DeviceKind::remote) key = d.perf_key;
  }
  EXPECT_EQ(key.find("127.0.0.1"), std::string::npos) << key;
  FerrydProcess second;  // another port
  auto o = options_for(second.address(), FerrydProcess::default_token);
  o.persist_perf_models = true;
  o.perf_model_dir = dir;
  ferry::Runtime rt(o);
  std::string now;
  for (const auto& d : rt.devices())
    if (d.kind == ferry::DeviceKind::remote) now = d.perf_key;
  EXPECT_EQ(now, key);
  std::size_t samples = 0;
  for (const auto& b : rt.perf_models().summary())
    if (b.kernel == "sum" && b.device_key == now) samples += b.samples;
  EXPECT_GE(samples, 5u) << "the models learned on the first port were not found for " << now;
  std::filesystem::remove_all(dir);
}

// `ferry models` lists, shows and resets what runtimes saved.
TEST(FerryModels, ListShowReset) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-cli-models-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    ferry::Runtime::Options o;
    o.workers = 1;
    o.gpus = "none";
    o.read_environment = false;
    o.perf_model_dir = dir;
    ferry::Runtime rt(o);
    auto x = rt.buffer<double>(1024);
    for (int i = 0; i < 3; ++i) rt.submit("sum", ferry::read(x)).wait();
  }
  const std::string where = " --dir " + dir.string();
  std::string out;
  ASSERT_EQ(run_cli("models" + where, out), 0) << out;
  EXPECT_NE(out.find("sum"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_cli("models show sum" + where, out), 0) << out;
  EXPECT_NE(out.find("median"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_cli("models reset sum" + where, out), 0) << out;
  EXPECT_NE(out.find("removed 1 model"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_cli("models show sum" + where, out), 1) << out;
  std::filesystem::remove_all(dir);
}

TEST(FerryCheck, PrintsTheHostsVersionDevicesKernelsAndLink) {
  FerrydProcess server;
  std::string out;
  ASSERT_EQ(run_cli("check ucx://" + server.address() + " --token-file " + server.token_file().string(), out), 0)
      << out;
  for (const char* needle : {"usable", "ferryd", "link:", "cpu (2 workers)", "axpy", "gemm"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle << "\n" << out;
}

TEST(FerryCheck, AWrongTokenFailsNamingTheHostAndTheReason) {
  FerrydProcess server({}, "the-right-token-for-this-host");
  std::string out;
  EXPECT_EQ(run_cli("check " + server.address() + " --token not-it", out), 1) << out;
  EXPECT_NE(out.find(server.address()), std::string::npos) << out;
  EXPECT_NE(out.find("auth_failed"), std::string::npos) << out;
}

// `ferry check` trusts a host exactly when a program would: under strict
// host keys (FERRY_STRICT_HOST_KEYS=1 or --strict) an unknown ferryd is
// refused, with the line to pin it, and nothing is written to known_hosts
// (which a strict program would then trust).
TEST(FerryCheck, StrictHostKeysRefuseAnUnknownHostAndPinNothing) {
  const auto dir = ferry::test::make_temp_dir();
  const auto host_key = dir / "host_key";
  const auto known_hosts = dir / "known_hosts";
  FerrydProcess server({"--host-key", host_key.string()});
  std::ofstream(known_hosts).flush();
  const std::string token = " --token-file " + server.token_file().string();
  const std::string pins = "FERRY_KNOWN_HOSTS=" + known_hosts.string();
  const std::string expected_line = server.address() + " " + public_line(host_key).substr(0, public_line(host_key).rfind(' '));
  for (const auto& [env, flag] : {std::pair{pins + " FERRY_STRICT_HOST_KEYS=1", std::string()},
                                  std::pair{pins, std::string(" --strict")}}) {
    std::string out;
    EXPECT_EQ(run_cli("check " + server.address() + token + flag, out, env), 1) << env << flag << "\n" << out;
    EXPECT_NE(out.find("does not pin"), std::string::npos) << out;
    EXPECT_NE(out.find(expected_line), std::string::npos) << "the refusal should give the line to add: " << expected_line
                                                          << "\n" << out;
    EXPECT_EQ(std::filesystem::file_size(known_hosts), 0u) << "ferry check pinned a host under strict checking";
  }
  // Pinned beforehand from ferryd's FILE.pub: usable, and the summary says what seals the link.
  std::ofstream(known_hosts) << server.address() << ' ' << public_line(host_key) << '\n';
  std::string out;
  EXPECT_EQ(run_cli("check " + server.address() + token + " --strict", out, pins), 0) << out;
  EXPECT_NE(out.find("cipher:"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(FerryCli, NoSubcommandPrintsHelp) {
  std::string out;
  EXPECT_EQ(run_cli("", out), 0) << out;
  EXPECT_NE(out.find("check"), std::string::npos) << out;
  EXPECT_NE(out.find("info"), std::string::npos) << out;
  std::string version;
  EXPECT_EQ(run_cli("--version", version), 0) << version;
  EXPECT_FALSE(version.empty());
}

}  // namespace
