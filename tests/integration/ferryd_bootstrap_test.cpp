// ferryd's front door as an attacker sees it: garbage, floods of half-open
// sockets and silent peers on its ports leave it up and serving; keys and
// pinned host keys decide who talks to whom.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "ferry/transport/identity.hpp"
#include "ferryd_process.hpp"
#include "raw_peer.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

// The forged UCX connection header that aborts UCX 1.13's sockaddr CM.
const std::vector<std::byte> forged_ucx_header = [] {
  std::vector<std::byte> bytes(8, std::byte{0xff});
  bytes.push_back(std::byte{0});
  bytes.insert(bytes.end(), 8, std::byte{'B'});
  return bytes;
}();

void expect_serving(FerrydProcess& server, const std::string& after) {
  ASSERT_EQ(server.wait_exit(0ms), -1) << "ferryd died after " << after << ":\n" << server.log();
  TestClient client(server.port(), "after-" + after);
  // A flood may have spent this address's allowance: it refills within seconds.
  for (int attempt = 0;; ++attempt) {
    try {
      client.authenticate(FerrydProcess::default_token);
      break;
    } catch (const std::exception& e) {
      ASSERT_LT(attempt, 40) << "no client got in after " << after << ": " << e.what();
      std::this_thread::sleep_for(250ms);
    }
  }
  client.send(proto::Ping{1});
  EXPECT_EQ(client.next_as<proto::Pong>().request, 1u) << after;
}

// TCP ports process `pid` listens on, from /proc (what `ss -ltnp` shows).
std::set<std::uint16_t> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  const auto fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& entry : std::filesystem::directory_iterator(fd_dir)) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<std::uint16_t> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      words >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.contains(inode)) continue;  // 0A: LISTEN
      ports.insert(static_cast<std::uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

TEST(FerrydBootstrap, ForgedUcxHeaderAndRandomGarbageLeaveFerrydServing) {
  FerrydProcess server({"--handshake-timeout", "1"});
  {
    RawPeer peer(server.port());
    peer.send(forged_ucx_header);
    EXPECT_TRUE(peer.closed_within(10s)) << "ferryd kept a peer that sent garbage";
  }
  expect_serving(server, "the forged UCX header");

  std::mt19937 random(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::byte> noise(1 + random() % 20000);
    for (auto& b : noise) b = static_cast<std::byte>(random());
    if (round % 4 == 1) {  // a plausible frame length, then junk
      const std::uint32_t length = 1 + random() % 8000;
      for (int i = 0; i < 4; ++i) noise[i % noise.size()] = static_cast<std::byte>(length >> (8 * i));
    }
    RawPeer peer(server.port());
    peer.send(noise);
    EXPECT_TRUE(peer.closed_within(10s)) << "round " << round;
  }
  expect_serving(server, "random garbage");
  EXPECT_NE(server.log().find("dropped"), std::string::npos) << server.log();
}

TEST(FerrydBootstrap, EveryOtherListeningPortSurvivesGarbage) {
  FerrydProcess server;
  {
    TestClient client(server.port());  // UCX's interfaces are up once a client is served
    client.authenticate(FerrydProcess::default_token);
  }
  auto ports = listening_ports(server.pid());
  ASSERT_TRUE(ports.contains(server.port())) << "could not read ferryd's sockets from /proc";
  ports.erase(server.port());
  std::cout << "  " << ports.size() << " other listening port(s): UCX's\n";
  std::mt19937 random(11);
  for (const std::uint16_t port : ports) {
    for (int round = 0; round < 5; ++round) {
      std::vector<std::byte> noise = forged_ucx_header;
      if (round > 0) {
        noise.resize(1 + random() % 4096);
        for (auto& b : noise) b = static_cast<std::byte>(random());
      }
      try {
        RawPeer peer(port);
        peer.send(noise);
        peer.closed_within(500ms);
      } catch (const std::runtime_error&) {
        // Bound to another address than loopback: not reachable from here at all.
      }
    }
    expect_serving(server, "garbage on UCX's port " + std::to_string(port));
  }
}

TEST(FerrydBootstrap, ThousandHalfOpenSocketsAreReapedAndAClientStillGetsIn) {
  constexpr int sockets = 1000;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < sockets + 200) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, sockets + 200);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < sockets + 200) GTEST_SKIP() << "the fd limit (" << limit.rlim_cur << ") is too low";

  FerrydProcess server({"--handshake-timeout", "0.5"});
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(server.port());
  for (int i = 0; i < sockets; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);  // in progress or done: either is half-open
    fds.push_back(fd);
  }
  // Each is closed by ferryd: refused at once (rate, cap) or reaped at the deadline.
  std::size_t closed = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::vector<bool> done(fds.size(), false);
  while (closed < fds.size() && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (done[i]) continue;
      std::byte sink[16];
      const ssize_t n = ::recv(fds[i], sink, sizeof sink, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
        done[i] = true;
        ++closed;
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(closed, fds.size()) << "half-open sockets ferryd never closed";
  expect_serving(server, "1000 half-open sockets");
}

// Silent and slow-drip sockets from many loopback addresses, reopened as
// ferryd closes them, for as long as the flood runs (bounded: `until`).
class Flood {
 public:
  Flood(std::uint16_t port, int sockets, int addresses) : port_(port), sockets_(sockets), addresses_(addresses) {
    thread_ = std::thread([this] { run(); });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
  }
  std::size_t opened() const { return opened_; }

 private:
  int open(int slot) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000002u + static_cast<std::uint32_t>(slot % addresses_));  // 127.0.0.2...
    ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port_);
    ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
    ++opened_;
    return fd;
  }
  void run() {
    std::vector<int> fds(static_cast<std::size_t>(sockets_), -1);
    const auto until = std::chrono::steady_clock::now() + 120s;
    for (int round = 0; !stop_ && std::chrono::steady_clock::now() < until; ++round) {
      for (int i = 0; i < sockets_; ++i) {
        int& fd = fds[static_cast<std::size_t>(i)];
        if (fd >= 0) {
          std::byte sink[64];
          const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
            ::close(fd);
            fd = -1;
          } else if (i % 2 == 1 && round % 4 == 0) {
            const std::byte drip{0};  // one byte of a frame's length, now and then: never a whole hello
            ::send(fd, &drip, 1, MSG_NOSIGNAL);
          }
        }
        if (fd < 0) fd = open(i);
      }
      std::this_thread::sleep_for(50ms);
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  std::uint16_t port_;
  int sockets_, addresses_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> opened_{0};
  std::thread thread_;
};

TEST(FerrydBootstrap, AFloodOfSilentSocketsFromManyAddressesLetsRealClientsIn) {
  FerrydProcess server;
  Flood flood(server.port(), 300, 59);
  // Long enough for the flood to fill every handshake slot ferryd has.
  while (flood.opened() < 300) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(500ms);
  int in = 0, within_2s = 0;
  std::vector<double> seconds;
  std::string last_error;
  for (int i = 0; i < 20; ++i) {
    TestClient client(server.port(), "real-" + std::to_string(i));
    transport::DialOptions options;
    options.token = FerrydProcess::default_token;
    options.timeout = 5s;  // half ferryd's deadline for silent peers (10 s)
    const auto start = std::chrono::steady_clock::now();
    try {
      client.connect(options);
      client.send(proto::Ping{1});
      if (client.next_as<proto::Pong>().request == 1u) ++in;
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      within_2s += seconds.back() <= 2.0;
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  // The measure (>= 95 % within 2 s) is printed, not asserted: a
  // loaded machine may be slow; a door the flood holds shut is not.
  std::sort(seconds.begin(), seconds.end());
  std::cout << "[ flood    ] " << in << " of 20 real sign-ins, " << within_2s << " within 2 s, while "
            << flood.opened() << " flood sockets were opened; sign-in "
            << (seconds.empty() ? 0.0 : seconds.front() * 1e3) << " / "
            << (seconds.empty() ? 0.0 : seconds[seconds.size() / 2] * 1e3) << " / "
            << (seconds.empty() ? 0.0 : seconds.back() * 1e3) << " ms (min / median / max)\n";
  EXPECT_EQ(in, 20) << "real clients signed in while " << flood.opened()
                    << " flood sockets were opened; the last error: " << last_error << "\n"
                    << server.log();
}

TEST(FerrydBootstrap, AFullFrontDoorSaysWhyItClosesAHandshake) {
  // One address may hold 16 handshakes in progress: a 17th pushes out the
  // oldest, which hears why in place of its challenge.
  FerrydProcess server({"--handshake-timeout", "30"});
  RawPeer first(server.port());
  std::this_thread::sleep_for(200ms);  // accepted first: the oldest
  std::vector<std::unique_ptr<RawPeer>> more;
  for (int i = 0; i < 16; ++i) more.push_back(std::make_unique<RawPeer>(server.port()));
  bool closed = false;
  const auto said = first.read_until_closed(5s, closed);
  ASSERT_TRUE(closed) << "the oldest of 17 silent handshakes from one address was not pushed out\n" << server.log();
  ASSERT_GT(said.size(), 4u) << "closed without a word";
  const auto message = proto::decode(std::span<const std::byte>(said).subspan(4));
  const auto* error = std::get_if<proto::ErrorMessage>(&message);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->status, proto::Status::busy);
  EXPECT_NE(error->message.find("made room"), std::string::npos) << error->message;
  EXPECT_TRUE(server.wait_for_log("dropped 127.0.0.1:")) << server.log();
  expect_serving(server, "a full front door");
}

// ---- identities ----

struct Keys {
  explicit Keys(const std::filesystem::path& dir) : dir(dir) {}
  std::filesystem::path add(const std::string& name, const std::string& options = "") {
    auto pair = transport::KeyPair::generate();
    const auto path = dir / name;
    pair.write(path);
    lines.push_back(transport::public_key_line(pair.public_key(), name) + (options.empty() ? "" : " " + options));
    return path;
  }
  std::filesystem::path write(const std::vector<std::string>& chosen) const {
    const auto path = dir / "authorized_keys";
    std::ofstream out(path, std::ios::trunc);
    out << "# test keys\n";
    for (const auto& line : chosen) out << line << '\n';
    return path;
  }
  std::filesystem::path dir;
  std::vector<std::string> lines;
};

transport::DialOptions with_key(const std::filesystem::path& key) {
  transport::DialOptions options;
  options.identity = transport::KeyPair::read(key);
  return options;
}

TEST(FerrydIdentity, AuthorizedKeyGetsInUnknownKeyIsRefused) {
  const auto dir = make_temp_dir();
  Keys keys(dir);
  const auto alice = keys.add("alice", "quota=1M");
  const auto mallory = transport::KeyPair::generate();
  mallory.write(dir / "mallory");
  FerrydProcess server({"--authorized-keys", keys.write(keys.lines).string()});

  TestClient good(server.port(), "alice-client");
  EXPECT_EQ(good.connect(with_key(alice)).memory_quota, 1u << 20);
  good.send(proto::Ping{5});
  EXPECT_EQ(good.next_as<proto::Pong>().request, 5u);
  EXPECT_TRUE(server.wait_for_log("alice")) << server.log();

  TestClient bad(server.port(), "mallory-client");
  const auto why = bad.refusal(with_key(dir / "mallory"));
  EXPECT_NE(why.find("not authorized"), std::string::npos) << why;
  EXPECT_NE(why.find(transport::fingerprint(mallory.public_key())), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

TEST(FerrydIdentity, KeyWithoutSourceKernelsMayNotDefineOne) {
  const auto dir = make_temp_dir();
  Keys keys(dir);
  const auto bob = keys.add("bob", "source-kernels=no");
  FerrydProcess server({"--authorized-keys", keys.write(keys.lines).string()});
  TestClient client(server.port());
  client.connect(with_key(bob));
  const std::string source = "__global__ void k(float* x) {}";
  client.send(proto::DefineKernel{1, "k", "k", {}, {}, static_cast<std::uint32_t>(source.size())}, source.data(),
              source.size());
  const auto done = client.next_as<proto::Done>();
  EXPECT_EQ(done.status, proto::Status::bad_arguments);
  EXPECT_NE(done.message.find("source-kernels"), std::string::npos) << done.message;
  std::filesystem::remove_all(dir);
}

TEST(FerrydIdentity, ClientRefusesAServerWhoseKeyIsNotThePinnedOne) {
  const auto dir = make_temp_dir();
  const auto known_hosts = dir / "known_hosts";
  FerrydProcess server({"--host-key", (dir / "host_key").string()});
  transport::DialOptions options;
  options.token = FerrydProcess::default_token;
  options.known_hosts = known_hosts;
  {
    TestClient first(server.port());
    first.connect(options);  // trusted on first use: pinned
  }
  {
    TestClient again(server.port());
    again.connect(options);  // the same key: welcome
  }
  // A man in the middle: another server, another key, at the pinned address.
  std::ofstream(known_hosts, std::ios::trunc)
      << "127.0.0.1:" << server.port() << ' '
      << transport::public_key_line(transport::KeyPair::generate().public_key(), "") << '\n';
  TestClient fooled(server.port());
  const auto why = fooled.refusal(options);
  EXPECT_NE(why.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << why;
  EXPECT_NE(why.find("pins"), std::string::npos) << why;

  options.pinning = transport::Pinning::strict;
  std::filesystem::remove(known_hosts);
  TestClient strict(server.port());
  EXPECT_NE(strict.refusal(options).find("does not pin"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A Kubernetes Secret mounted for a pod with an fsGroup: root owns the
// files, the pod's group may read them (mode 440). ferryd serves with that
// host key, as pinned, and does not warn about it in every pod's log.
TEST(FerrydIdentity, AHostKeyMountedAsAKubernetesSecretIsUsedWithoutAWarning) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the test gives the key file another owner, as the kubelet does";
  const auto dir = make_temp_dir();
  const auto key = transport::KeyPair::generate();
  key.write(dir / "host_key");
  constexpr uid_t kubelet_owner = 54321;  // not ferryd's user; the group is ferryd's own
  ASSERT_EQ(chown((dir / "host_key").c_str(), kubelet_owner, getegid()), 0);
  ASSERT_EQ(chmod((dir / "host_key").c_str(), 0440), 0);
  FerrydProcess server({"--host-key", (dir / "host_key").string()});
  std::ofstream(dir / "known_hosts") << "127.0.0.1:" << server.port() << ' '
                                     << transport::public_key_line(key.public_key(), "") << '\n';
  transport::DialOptions options;
  options.token = FerrydProcess::default_token;
  options.known_hosts = dir / "known_hosts";
  options.pinning = transport::Pinning::strict;
  TestClient client(server.port());
  EXPECT_NO_THROW(client.connect(options)) << server.log();
  EXPECT_EQ(server.log().find("lets others"), std::string::npos) << server.log();
  EXPECT_EQ(server.log().find("readable by others"), std::string::npos) << server.log();

  // The same file readable by a group ferryd is not in: refused, naming it.
  ASSERT_EQ(chown((dir / "host_key").c_str(), kubelet_owner, 54321), 0);
  std::ofstream(dir / "token") << FerrydProcess::default_token;
  chmod((dir / "token").c_str(), 0600);
  std::string out;
  EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", (dir / "token").string(),
                                        "--host-key", (dir / "host_key").string()},
                                       &out),
            1);
  EXPECT_NE(out.find("host_key: mode 440 lets others than its owner use it"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(FerrydIdentity, SighupRemovingAKeyEndsItsSessions) {
  const auto dir = make_temp_dir();
  Keys keys(dir);
  const auto alice = keys.add("alice");
  const auto bob = keys.add("bob");
  const auto file = keys.write(keys.lines);
  FerrydProcess server({"--authorized-keys", file.string()});
  TestClient a(server.port(), "a");
  a.connect(with_key(alice));
  TestClient b(server.port(), "b");
  b.connect(with_key(bob));

  keys.write({keys.lines[1]});  // bob only
  server.signal(SIGHUP);
  const auto bye = a.next_as<proto::Bye>();
  EXPECT_NE(bye.message.find("no longer authorized"), std::string::npos) << bye.message;
  EXPECT_TRUE(a.wait_closed());
  EXPECT_TRUE(server.wait_for_log("1 session ended")) << server.log();
  b.send(proto::Ping{9});
  EXPECT_EQ(b.next_as<proto::Pong>().request, 9u);
  TestClient again(server.port());
  EXPECT_NE(again.refusal(with_key(alice)).find("not authorized"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A reload's new options reach the sessions already open: a bigger quota
// admits more at once, source-kernels=no stops the next definition.
TEST(FerrydIdentity, SighupChangingAKeysOptionsReachesItsOpenSession) {
  const auto dir = make_temp_dir();
  Keys keys(dir);
  const auto alice = keys.add("alice", "quota=64KiB");
  const auto file = keys.write(keys.lines);
  FerrydProcess server({"--authorized-keys", file.string()});
  TestClient a(server.port(), "a");
  a.connect(with_key(alice));
  const std::vector<std::byte> bytes(1 << 20, std::byte{7});
  const auto before = a.put(1, proto::DType::u8, 1, bytes.size(), bytes.data(), bytes.size());
  ASSERT_EQ(before.status, proto::Status::quota_exceeded) << before.message;

  const std::string line = keys.lines[0];
  keys.write({line.substr(0, line.find(" quota=")) + " quota=4MiB source-kernels=no"});
  server.signal(SIGHUP);
  ASSERT_TRUE(server.wait_for_log(" reread: ")) << server.log();
  const auto after = a.put(1, proto::DType::u8, 1, bytes.size(), bytes.data(), bytes.size());
  EXPECT_EQ(after.status, proto::Status::ok) << "the open session kept its old quota: " << after.message;
  const std::string source = "__global__ void k(float* x) {}";
  a.send(proto::DefineKernel{a.next_request(), "k", "k", {}, {}, static_cast<std::uint32_t>(source.size())},
         source.data(), source.size());
  const auto done = a.next_as<proto::Done>();
  EXPECT_EQ(done.status, proto::Status::bad_arguments) << "source-kernels=no did not reach the open session";
  EXPECT_NE(done.message.find("source-kernels"), std::string::npos) << done.message;
  a.send(proto::Ping{3});
  EXPECT_EQ(a.next_as<proto::Pong>().request, 3u);
  std::filesystem::remove_all(dir);
}

TEST(FerrydIdentity, FerryKeygenMakesAKeyFerrydAdmits) {
  const auto dir = make_temp_dir();
  const auto key = dir / "id";
  const std::string command = std::string(FERRY_CLI_PATH) + " keygen " + key.string() + " --name carol > " +
                              (dir / "out").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(std::system(command.c_str()), 0) << "keygen replaced an existing key";
  std::string line;
  std::getline(std::ifstream(dir / "id.pub"), line);
  EXPECT_NE(line.find(" carol"), std::string::npos) << line;
  std::ofstream(dir / "authorized_keys") << line << " quota=2M\n";
  FerrydProcess server({"--authorized-keys", (dir / "authorized_keys").string()});
  TestClient client(server.port());
  EXPECT_EQ(client.connect(with_key(key)).memory_quota, 2u << 20);
  EXPECT_TRUE(server.wait_for_log("carol")) << server.log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::test
