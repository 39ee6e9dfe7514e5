// The pool while a program runs: real ferryd processes over real UCX
// (loopback) that dial a listening runtime (ferryd --connect), and hosts
// added, removed and discovered by name (dns:) mid-run.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <cstring>
#include <sstream>

#include "../support/builtin_conformance.hpp"
#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"
#include "../support/proc_status.hpp"
#include "ferry/transport/identity.hpp"

namespace {

using ferry::test::FerrydProcess;
using ferry::test::sockets_of;
using namespace std::chrono_literals;

ferry::Runtime::Options base_options(const std::filesystem::path& token_file) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // a test that wants a GPU asks for one
  o.token_file = token_file;
  o.remote_timeout = 5s;
  return o;
}

// The name of the first remote device that is up and in the pool, once one is (empty after `timeout`).
std::string wait_for_remote(ferry::Runtime& rt, const std::string& name_part = {},
                            std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& d : rt.devices())
      if (d.kind == ferry::DeviceKind::remote && d.description.find("down") == std::string::npos &&
          d.name.find(name_part) != std::string::npos)
        return d.name;
    std::this_thread::sleep_for(20ms);
  }
  return {};
}

bool is_down(ferry::Runtime& rt, const std::string& name, std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& d : rt.devices())
      if (d.name == name && d.description.find("down") != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

ferry::OnOption on_device(const std::string& name) { return ferry::on(ferry::remote(name.substr(std::string("remote:").size()))); }

// ---- reverse connections ----

TEST(ReverseConnection, FerrydDialsAListeningRuntimeAndRunsTasksLikeTheCpu) {
  FerrydProcess token_holder({"--gpus", "none"});  // only for its token file
  auto options = base_options(token_holder.token_file());
  options.listen = "127.0.0.1:0";
  ferry::Runtime rt(options);
  ASSERT_NE(rt.listen_port(), 0);
  FerrydProcess server({"--connect", "127.0.0.1:" + std::to_string(rt.listen_port())});
  const std::string name = wait_for_remote(rt);
  ASSERT_FALSE(name.empty()) << "ferryd never joined; its log:\n" << server.log();
  EXPECT_TRUE(name.starts_with("remote:SHA256:")) << name << ": a host that dials in is named by its host key";
  EXPECT_EQ(ferry::test::expect_every_builtin_conforms(
                rt, {ferry::on(ferry::remote(name.substr(std::string("remote:").size()))), name, 0.0}),
            ferry::test::builtins_checked);
  EXPECT_TRUE(server.wait_for_log("connected to the client listening at 127.0.0.1:")) << server.log();
  const std::string fingerprint = name.substr(std::string("remote:").size());
  rt.remove_remote(fingerprint);
  EXPECT_TRUE(is_down(rt, name));
  ASSERT_TRUE(server.wait_for_log("went away; dialling it again")) << server.log();
  std::this_thread::sleep_for(1s);  // it calls again (backoff from 250 ms): refused while removed
  EXPECT_TRUE(wait_for_remote(rt, "", 10ms).empty()) << "a removed host came back on its own";
  // Turned away in the handshake, before a connection is made, and told why.
  EXPECT_TRUE(server.wait_for_log("turned away: removed from this runtime's pool")) << server.log();
  rt.add_remote(fingerprint);
  EXPECT_EQ(wait_for_remote(rt), name) << server.log();
}

TEST(ReverseConnection, FerrydDialsAgainWhenTheClientComesBack) {
  FerrydProcess token_holder;
  auto options = base_options(token_holder.token_file());
  const std::uint16_t port = ferry::test::stable_port();
  options.listen = "127.0.0.1:" + std::to_string(port);
  auto rt = std::make_unique<ferry::Runtime>(options);
  FerrydProcess server({"--connect", "127.0.0.1:" + std::to_string(port)});
  ASSERT_FALSE(wait_for_remote(*rt).empty()) << server.log();
  rt.reset();  // the client goes away
  ASSERT_TRUE(server.wait_for_log("went away; dialling it again")) << server.log();
  rt = std::make_unique<ferry::Runtime>(options);
  const std::string name = wait_for_remote(*rt);
  ASSERT_FALSE(name.empty()) << "ferryd did not dial again; its log:\n" << server.log();
  auto x = rt->buffer<double>(1000);
  std::ranges::fill(x.host(), 2.0);
  auto t = rt->submit("scal", ferry::readwrite(x), 3.0, on_device(name));
  t.wait();
  EXPECT_EQ(t.device(), name);
  EXPECT_EQ(x.host()[999], 6.0);
}

TEST(ReverseConnection, TheListenerDropsASilentPeerAtItsDeadline) {
  FerrydProcess token_holder;
  auto options = base_options(token_holder.token_file());
  options.listen = "127.0.0.1:0";
  options.remote_timeout = 500ms;  // the handshake's deadline too
  ferry::Runtime rt(options);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(rt.listen_port());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  // The runtime speaks first (a hello), then waits; a peer that never answers is closed.
  char sink[4096];
  ssize_t n = 0, total = 0;
  while ((n = ::recv(fd, sink, sizeof sink, 0)) > 0) total += n;
  EXPECT_GT(total, 0) << "the runtime sent no hello";
  EXPECT_EQ(n, 0) << "the silent peer was not dropped: " << std::strerror(errno);
  ::close(fd);
  for (const auto& d : rt.devices()) EXPECT_NE(d.kind, ferry::DeviceKind::remote) << d.name;
}

TEST(ReverseConnection, WithKeysOnlyAHostListedInKnownHostsGetsIn) {
  FerrydProcess holder;  // a fresh folder
  const auto dir = holder.dir();
  const auto client = ferry::transport::KeyPair::generate();
  client.write(dir / "id");
  const auto host = ferry::transport::KeyPair::generate();
  host.write(dir / "host_key");
  std::ofstream(dir / "authorized") << ferry::transport::public_key_line(client.public_key(), "tester") << '\n';
  std::ofstream(dir / "known_hosts").flush();
  auto options = base_options({});
  options.identity = dir / "id";
  options.known_hosts = dir / "known_hosts";
  options.listen = "127.0.0.1:0";
  ferry::Runtime rt(options);
  FerrydProcess server({"--connect", "127.0.0.1:" + std::to_string(rt.listen_port()), "--authorized-keys",
                        (dir / "authorized").string(), "--host-key", (dir / "host_key").string()});
  ASSERT_TRUE(server.wait_for_log("cannot serve the client listening at")) << server.log();
  EXPECT_TRUE(wait_for_remote(rt, "", 500ms).empty()) << "a host whose key nobody listed was let in";
  // Listed under any name: its next call gets in (ferryd redials with backoff).
  std::ofstream(dir / "known_hosts") << "gpu-desk " << ferry::transport::public_key_line(host.public_key(), "") << '\n';
  const std::string name = wait_for_remote(rt);
  ASSERT_FALSE(name.empty()) << server.log();
  EXPECT_EQ(name, "remote:" + ferry::transport::fingerprint(host.public_key()));
  auto x = rt.buffer<float>(100);
  std::ranges::fill(x.host(), 1.0f);
  EXPECT_EQ(rt.submit("sum", ferry::read(x), on_device(name)).result(), 100.0);
}

TEST(ReverseConnection, BadConnectCommandLinesExitWithTwo) {
  FerrydProcess token_holder;
  const std::string token = token_holder.token_file().string();
  std::string out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--token-file", token}, &out), 2) << out;
  EXPECT_NE(out.find("--listen"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--token-file", token, "--connect", "127.0.0.1:0"}, &out), 2) << out;
  EXPECT_NE(out.find("port"), std::string::npos) << out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--token-file", token, "--connect", "no-such-host.invalid:7070"}, &out), 2);
  EXPECT_NE(out.find("no-such-host.invalid"), std::string::npos) << out;
}

// ---- adding and removing hosts mid-run ----

TEST(ElasticPool, AHostAddedMidRunGetsWork) {
  FerrydProcess server;
  ferry::Runtime rt(base_options(server.token_file()));
  auto x = rt.buffer<double>(1 << 14), y = rt.buffer<double>(1 << 14);
  std::ranges::fill(x.host(), 1.0);
  for (int i = 0; i < 20; ++i) rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0);
  rt.add_remote(server.address());  // while those run
  EXPECT_THROW(rt.add_remote(server.address()), ferry::UsageError);
  std::vector<ferry::Task> later;
  for (int i = 0; i < 20; ++i)
    later.push_back(rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, ferry::on(ferry::remote(server.address()))));
  rt.wait();
  for (auto& t : later) EXPECT_EQ(t.device(), "remote:" + server.address());
  auto h = y.host();
  EXPECT_EQ(h[0], 40.0);
  EXPECT_EQ(h[(1 << 14) - 1], 40.0);
}

TEST(ElasticPool, AHostRemovedMidRunDrainsAndResultsStayCorrect) {
  FerrydProcess server;
  auto options = base_options(server.token_file());
  options.remotes = {server.address()};
  ferry::Runtime rt(options);
  const std::size_t n = 1 << 15;
  auto x = rt.buffer<double>(n), y = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  std::vector<ferry::Task> tasks;
  // A chain whose running result lives only on the host until it is removed.
  for (int i = 0; i < 60; ++i) {
    // Placed on whatever is in the pool: the host, until it leaves.
    if (i < 30) {
      tasks.push_back(rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, ferry::on(ferry::remote(server.address()))));
    } else {
      tasks.push_back(rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0));
    }
    if (i == 29) {
      tasks[10].wait();
      rt.remove_remote(server.address());  // returns once drained
    }
  }
  rt.wait();
  int on_host = 0, after = 0;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    on_host += tasks[i].device() == "remote:" + server.address();
    if (i >= 30) after += tasks[i].device() == "remote:" + server.address();
  }
  EXPECT_GT(on_host, 0) << "nothing ran on the host before it left";
  EXPECT_EQ(after, 0) << "tasks were placed on a host removed from the pool";
  {
    auto h = y.host_read();  // a view holds back the tasks after it until it goes
    EXPECT_EQ(h[0], 60.0);
    EXPECT_EQ(h[n - 1], 60.0);
  }
  EXPECT_TRUE(is_down(rt, "remote:" + server.address()));
  EXPECT_THROW(rt.remove_remote(server.address()), ferry::UsageError);
  // Back in: it runs tasks again.
  rt.add_remote(server.address());
  ASSERT_FALSE(wait_for_remote(rt, server.address()).empty());
  auto t = rt.submit("scal", ferry::readwrite(y), 0.5, ferry::on(ferry::remote(server.address())));
  t.wait();
  EXPECT_EQ(t.device(), "remote:" + server.address());
  EXPECT_EQ(y.host()[0], 30.0);
}

// Both processes live on while a connection between them ends: UCX 1.13's
// TCP transport closed such a connection's sockets only when a worker went,
// so each removal left one per endpoint open at both ends (one more here
// and in ferryd per cycle, with the shared-memory lane).
TEST(ElasticPool, AHostRemovedAndAddedAgainLeavesNoSocketOpen) {
  FerrydProcess server;
  auto options = base_options(server.token_file());
  options.remotes = {server.address()};
  ferry::Runtime rt(options);
  auto x = rt.buffer<double>(4096);
  std::ranges::fill(x.host(), 0.5);
  const auto on_host = ferry::on(ferry::remote(server.address()));
  EXPECT_EQ(rt.submit("sum", ferry::read(x), on_host).result(), 2048.0);
  const int here = sockets_of(::getpid()), there = sockets_of(server.pid());
  for (int cycle = 0; cycle < 4; ++cycle) {
    rt.remove_remote(server.address());
    rt.add_remote(server.address());
    ASSERT_FALSE(wait_for_remote(rt, server.address()).empty()) << "cycle " << cycle;
    auto sum = rt.submit("sum", ferry::read(x), on_host);
    EXPECT_EQ(sum.result(), 2048.0);
    EXPECT_EQ(sum.device(), "remote:" + server.address());
  }
  // The last removal's sockets close as its worker goes: a moment later.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline &&
         (sockets_of(::getpid()) > here || sockets_of(server.pid()) > there))
    std::this_thread::sleep_for(20ms);
  EXPECT_LE(sockets_of(::getpid()), here) << "sockets left open in this process after 4 removals";
  EXPECT_LE(sockets_of(server.pid()), there) << "sockets left open in ferryd after 4 removals";
}

// ---- discovery by name ----

// A hosts file, as /etc/hosts: "IP NAME" lines; rewritten by the test as hosts come and go.
class HostsFile {
 public:
  explicit HostsFile(std::filesystem::path path) : path_(std::move(path)) {}
  void write(const std::vector<std::string>& ips, const std::string& name) const {
    const auto next = path_.string() + ".next";
    {
      std::ofstream out(next);
      for (const auto& ip : ips) out << ip << ' ' << name << '\n';
    }
    std::filesystem::rename(next, path_);  // whole: the resolver never reads half a file
  }
  std::vector<std::string> resolve(const std::string& name) const {
    std::ifstream in(path_);
    std::vector<std::string> ips;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string ip, host;
      if (words >> ip >> host && host == name) ips.push_back(ip);
    }
    if (ips.empty()) throw ferry::Error(name + " does not resolve");
    return ips;
  }

 private:
  std::filesystem::path path_;
};

TEST(DnsDiscovery, HostsJoinAndLeaveThePoolWithTheName) {
  const std::uint16_t port = ferry::test::stable_port();
  FerrydProcess a({}, FerrydProcess::default_token, port);
  FerrydProcess b({"--listen", "127.0.0.2:" + std::to_string(port)});
  HostsFile hosts(a.dir() / "hosts");
  hosts.write({"127.0.0.1"}, "ferryd.pool.test");
  auto options = base_options(a.token_file());
  options.remotes = {"dns:ferryd.pool.test:" + std::to_string(port)};
  options.discovery_interval = 100ms;
  options.resolve = [&hosts](const std::string& name) { return hosts.resolve(name); };
  ferry::Runtime rt(options);
  const std::string first = "127.0.0.1:" + std::to_string(port), second = "127.0.0.2:" + std::to_string(port);
  ASSERT_FALSE(wait_for_remote(rt, first, 1s).empty()) << "the name's first host is not in the pool at start";

  hosts.write({"127.0.0.1", "127.0.0.2"}, "ferryd.pool.test");
  ASSERT_FALSE(wait_for_remote(rt, second).empty()) << "a host that joined the name did not join the pool";
  auto x = rt.buffer<double>(4096);
  std::ranges::fill(x.host(), 1.0);
  auto t = rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote(second)));
  t.wait();
  EXPECT_EQ(t.device(), "remote:" + second);

  hosts.write({"127.0.0.2"}, "ferryd.pool.test");
  EXPECT_TRUE(is_down(rt, "remote:" + first)) << "a host that left the name stayed in the pool";
  auto u = rt.submit("scal", ferry::readwrite(x), 2.0);
  u.wait();
  EXPECT_NE(u.device(), "remote:" + first);
  EXPECT_EQ(x.host()[4095], 4.0);
}

TEST(DnsDiscovery, AMalformedEntryIsAUsageErrorNamingIt) {
  FerrydProcess token_holder;
  auto options = base_options(token_holder.token_file());
  options.remotes = {"dns:no-port-here"};
  try {
    ferry::Runtime rt(options);
    FAIL() << "accepted";
  } catch (const ferry::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("dns:no-port-here"), std::string::npos) << e.what();
  }
}

}  // namespace
