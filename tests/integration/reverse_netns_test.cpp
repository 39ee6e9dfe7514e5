// A GPU host behind NAT: ferryd in a network namespace that drops every
// inbound connection (nftables drops SYNs coming in), the client runtime in
// the root namespace listening. ferryd dials out and the runtime uses it,
// UCX over TCP across the veth link. Needs root, `ip netns` and `nft`;
// skipped, saying why, without them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>

#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"

namespace {

using namespace std::chrono_literals;

constexpr const char* ns = "ferry-nat-test";
constexpr const char* outside = "10.79.0.1";
constexpr const char* inside = "10.79.0.2";

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Whether a TCP connection from here to ip:port is accepted within a second.
bool reachable(const char* ip, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &address.sin_addr);
  ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  pollfd p{fd, POLLOUT, 0};
  bool ok = false;
  if (::poll(&p, 1, 1000) == 1) {
    int error = 0;
    socklen_t size = sizeof error;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
    ok = error == 0;
  }
  ::close(fd);
  return ok;
}

class NatNamespace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a network namespace";
    if (sh("ip netns list") != 0) GTEST_SKIP() << "'ip netns' is not available";
    if (sh("nft --version") != 0) GTEST_SKIP() << "nft (nftables) is not installed (scripts/install-deps.sh)";
    lock_ = ::open("/run/ferry-nat-test.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(lock_, 0);
    ASSERT_EQ(::flock(lock_, LOCK_EX), 0);
    teardown();  // a run killed before its cleanup
    if (sh(std::string("ip netns add ") + ns) != 0) GTEST_SKIP() << "cannot create network namespaces here";
    created_ = true;
    const std::string in = std::string("ip netns exec ") + ns + " ";
    ASSERT_EQ(sh(std::string("ip link add ferry-nat0 type veth peer name ferry-nat1 netns ") + ns), 0);
    ASSERT_EQ(sh(std::string("ip addr add ") + outside + "/24 dev ferry-nat0 && ip link set ferry-nat0 up"), 0);
    ASSERT_EQ(sh(in + "ip addr add " + inside + "/24 dev ferry-nat1"), 0);
    ASSERT_EQ(sh(in + "ip link set ferry-nat1 up && " + in + "ip link set lo up"), 0);
    // Like a NAT: connections out, and their answers, pass; none come in.
    ASSERT_EQ(sh(in + "nft add table inet nat_test"), 0);
    ASSERT_EQ(sh(in + "nft \"add chain inet nat_test input { type filter hook input priority 0; policy accept; }\""), 0);
    ASSERT_EQ(sh(in + "nft add rule inet nat_test input iifname ferry-nat1 \"tcp flags & (syn | ack) == syn drop\""), 0);
  }

  void TearDown() override {
    if (ferryd_ > 0) {
      ::kill(ferryd_, SIGKILL);
      ::waitpid(ferryd_, nullptr, 0);
    }
    if (created_) teardown();
    if (lock_ >= 0) ::close(lock_);
  }

  static void teardown() { sh(std::string("ip netns del ") + ns); }

  // ferryd inside, listening on the namespace's address (where nothing gets in) and dialling out.
  void start_ferryd(const std::filesystem::path& dir, std::uint16_t client_port) {
    const auto port_file = dir / "inside-port";
    log_ = dir / "inside.log";
    std::vector<std::string> text{"/usr/sbin/ip", "netns", "exec", ns, "env", "UCX_TLS=tcp",
                                  "UCX_NET_DEVICES=ferry-nat1", FERRYD_PATH,
                                  "--listen", std::string(inside) + ":0", "--port-file", port_file.string(),
                                  "--token-file", (dir / "token").string(), "--gpus", "none", "--workers", "2",
                                  "--connect", std::string(outside) + ":" + std::to_string(client_port)};
    ASSERT_NO_THROW(ferryd_ = ferry::test::spawn_logged(std::move(text), log_));
    for (int i = 0; i < 1000 && inside_port_ == 0; ++i) {
      std::ifstream in(port_file);
      unsigned port = 0;
      if (in >> port) inside_port_ = static_cast<std::uint16_t>(port);
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_NE(inside_port_, 0) << log();
  }

  std::string log() const {
    std::ifstream in(log_);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  int lock_ = -1;
  bool created_ = false;
  pid_t ferryd_ = -1;
  std::uint16_t inside_port_ = 0;
  std::filesystem::path log_;
};

TEST_F(NatNamespace, FerrydDialsOutToTheClientAndRunsItsTasks) {
  ferry::test::FerrydProcess token_holder;  // a token file in a fresh folder
  // The client's UCX over TCP too, on the link: no shared memory between the namespaces.
  ::setenv("UCX_TLS", "tcp", 1);
  ::setenv("UCX_NET_DEVICES", "ferry-nat0", 1);
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // a test that wants a GPU asks for one
  o.token_file = token_holder.token_file();
  o.listen = std::string(outside) + ":0";
  o.remote_timeout = 5s;
  std::unique_ptr<ferry::Runtime> rt;
  try {
    rt = std::make_unique<ferry::Runtime>(o);
  } catch (...) {
    ::unsetenv("UCX_TLS");
    ::unsetenv("UCX_NET_DEVICES");
    throw;
  }
  ::unsetenv("UCX_TLS");
  ::unsetenv("UCX_NET_DEVICES");
  start_ferryd(token_holder.dir(), rt->listen_port());
  EXPECT_FALSE(reachable(inside, inside_port_)) << "the namespace accepts inbound connections: the test proves nothing";

  std::string name;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (name.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const auto& d : rt->devices())
      if (d.kind == ferry::DeviceKind::remote && d.description.find("down") == std::string::npos) name = d.name;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_FALSE(name.empty()) << "ferryd never joined; its log:\n" << log();
  const std::size_t n = 1 << 16;
  auto x = rt->buffer<double>(n), y = rt->buffer<double>(n);
  for (std::size_t i = 0; i < n; ++i) x.host()[i] = static_cast<double>(i % 97);
  std::ranges::fill(y.host(), 1.0);
  const auto there = ferry::on(ferry::remote(name.substr(std::string("remote:").size())));
  std::vector<ferry::Task> tasks;
  for (int i = 0; i < 8; ++i) tasks.push_back(rt->submit("axpy", ferry::read(x), ferry::readwrite(y), 0.5, there));
  rt->wait();
  for (auto& t : tasks) EXPECT_EQ(t.device(), name) << log();
  auto h = y.host();
  for (std::size_t i : {std::size_t{0}, std::size_t{5}, n - 1})
    EXPECT_EQ(h[i], 1.0 + 8 * 0.5 * static_cast<double>(i % 97)) << i;
  rt.reset();
}

}  // namespace
