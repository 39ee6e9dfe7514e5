// A host another tenant names as a fetch source (docs/security.md): real
// ferryd processes on loopback, and sockets of the test's own standing in
// for what an adversarial tenant can name instead of a ferryd: a port that
// accepts and never answers, a service that sends a banner, a host the
// operator did not allow.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "../support/proc_status.hpp"
#include "ferry/transport/auth.hpp"
#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace {

using ferry::test::FerrydProcess;
using ferry::test::proc_status;
using ferry::test::TestClient;
namespace proto = ferry::protocol;
using namespace std::chrono_literals;

// FetchLimits in tools/ferryd/peer_fetch.hpp.
constexpr std::size_t fetch_threads = 8;
constexpr std::size_t queued_per_client = 32;

// A TCP listener on loopback that accepts every connection, writes
// `banner` (nothing: it never says a word) and keeps it open.
class Listener {
 public:
  explicit Listener(std::string banner = {}) : banner_(std::move(banner)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd_, 512) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0)
      throw std::runtime_error(std::string("test listener: ") + std::strerror(errno));
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) return;  // shut down
        if (!banner_.empty()) (void)!::write(client, banner_.data(), banner_.size());
        std::lock_guard lock(mutex_);
        clients_.push_back(client);
      }
    });
  }
  ~Listener() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    for (int client : clients_) ::close(client);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::size_t accepted() {
    std::lock_guard lock(mutex_);
    return clients_.size();
  }
  bool wait_accepted(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (accepted() < n)
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      else
        std::this_thread::sleep_for(10ms);
    return true;
  }

 private:
  std::string banner_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<int> clients_;
};

// A loopback port nothing listens on (bound a moment, then let go).
std::string closed_address() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), size);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
}

proto::Secret random_secret() {
  proto::Secret secret{};
  const auto random = ferry::transport::random_nonce();
  std::memcpy(secret.data(), random.data(), secret.size());
  return secret;
}

// Tells `client`'s ferryd to fetch `bytes` into its replica `buffer` from
// `source` (without waiting for the answer).
void send_fetch(TestClient& client, std::uint64_t buffer, const std::string& source, std::uint64_t bytes,
                std::uint64_t capability = 7, const proto::Secret& secret = {}, const proto::Key& key = {},
                std::uint64_t source_buffer = 1) {
  client.send(proto::Fetch{client.next_request(), buffer, proto::DType::u8, 1, bytes, 0, bytes, source, key, capability,
                           secret, source_buffer, 0});
}

// Puts the whole replica in one message and waits for its own answer
// (answers to fetches may come first).
void put_whole(TestClient& client, std::uint64_t buffer, const std::vector<std::byte>& data) {
  const std::uint64_t request = client.next_request();
  client.send(proto::Put{request, buffer, proto::DType::u8, 1, data.size(), 0}, data.data(), data.size());
  for (;;) {
    const auto ack = client.next_as<proto::PutAck>(60s);
    if (ack.request != request) continue;
    ASSERT_EQ(ack.status, proto::Status::ok) << ack.message;
    return;
  }
}

bool nothing_arrived(TestClient& client) {
  try {
    client.next(0ms);
    return false;
  } catch (const std::runtime_error&) {
    return true;
  }
}

// A client with a replica on A, and a client of B that fetches it.
struct Source {
  explicit Source(std::size_t n, std::vector<std::string> b_args = {})
      : b(std::move(b_args)), a_client(a.port()), data(n, std::byte{0x5a}) {
    a_client.authenticate(FerrydProcess::default_token);
    a_client.put_all(1, proto::DType::u8, 1, n, data.data(), n, 1 << 20);
    a_key = a_client.host_key();
  }
  // Grants B (as `b_client` sees its key) the whole of replica 1.
  void grant(std::uint64_t capability, const proto::Secret& secret, const proto::Key& reader) {
    a_client.send(proto::GrantRead{a_client.next_request(), capability, secret, reader, 1, 0, data.size(), 60000});
    const auto ack = a_client.next_as<proto::PutAck>();
    ASSERT_EQ(ack.status, proto::Status::ok) << ack.message;
  }
  FerrydProcess a, b;
  TestClient a_client;
  std::vector<std::byte> data;
  proto::Key a_key{};
};

// One tenant's fetches from a port that never answers used to hold the one
// dial lock for 10 s each: another tenant's fetch from a live source waited
// behind all of them (58.5 s behind six).
TEST(FetchLimits, OneTenantsSilentSourceDoesNotDelayAnothersFetch) {
  Source hosts(4096);
  Listener silent;
  TestClient stalled(hosts.b.port(), "tenant-stalled"), other(hosts.b.port(), "tenant-other");
  stalled.authenticate(FerrydProcess::default_token);
  other.authenticate(FerrydProcess::default_token);
  for (std::uint64_t i = 0; i < 6; ++i) send_fetch(stalled, 10 + i, silent.address(), 1024);
  ASSERT_TRUE(silent.wait_accepted(1)) << hosts.b.log();

  const auto secret = random_secret();
  hosts.grant(41, secret, other.host_key());
  send_fetch(other, 2, hosts.a.address(), hosts.data.size(), 41, secret, hosts.a_key);
  const auto ack = other.next_as<proto::PutAck>(120s);
  ASSERT_EQ(ack.status, proto::Status::ok) << ack.message;
  EXPECT_EQ(other.get(2, 0, hosts.data.size()).size(), hosts.data.size());
  // The observable: the other tenant's fetch is done while the first
  // tenant's fetches have not even failed yet.
  EXPECT_TRUE(nothing_arrived(stalled)) << "the stalled tenant's fetches were answered before the other's";
}

// 300 fetches to a silent port took 300 threads (307 in all, +355 MB).
TEST(FetchLimits, ManyFetchesToASilentPortTakeAFixedSetOfThreads) {
  FerrydProcess b;
  Listener silent;
  TestClient client(b.port(), "tenant-many");
  client.authenticate(FerrydProcess::default_token);
  const std::uint64_t threads_before = proc_status(b.pid(), "Threads");
  constexpr std::size_t fetches = 300;
  for (std::uint64_t i = 0; i < fetches; ++i) send_fetch(client, 100 + i, silent.address(), 1024);
  // Answered in order: once the stats come, every fetch was taken or refused.
  client.send(proto::StatsRequest{client.next_request()});
  std::size_t refused = 0;
  for (;;) {
    auto received = client.next(60s);
    if (std::holds_alternative<proto::StatsReply>(received.message)) break;
    const auto& ack = std::get<proto::PutAck>(received.message);
    EXPECT_NE(ack.status, proto::Status::ok);
    EXPECT_NE(ack.message.find("waiting"), std::string::npos) << ack.message;
    ++refused;
  }
  const std::uint64_t threads = proc_status(b.pid(), "Threads");
  std::printf("threads: %llu before the fetches, %llu with %zu asked for (%zu refused)\n",
              static_cast<unsigned long long>(threads_before), static_cast<unsigned long long>(threads), fetches,
              refused);
  // The fetch threads, the fetches' UCX worker and what UCX starts for it.
  EXPECT_LE(threads, threads_before + fetch_threads + 6) << "before: " << threads_before;
  // Past a client's queue the rest are refused at once, saying why.
  EXPECT_GE(refused, fetches - queued_per_client - 2);
  EXPECT_EQ(b.stop(SIGTERM), 0) << b.log();
}

// SIGTERM waited for every pending dial in turn, ~10 s each (97.6 s for 10).
TEST(FetchLimits, SigtermAbandonsPendingDials) {
  FerrydProcess b;
  Listener silent_one, silent_two;
  TestClient first(b.port(), "tenant-first"), second(b.port(), "tenant-second");
  first.authenticate(FerrydProcess::default_token);
  second.authenticate(FerrydProcess::default_token);
  for (std::uint64_t i = 0; i < 5; ++i) {
    send_fetch(first, 10 + i, (i % 2 ? silent_one : silent_two).address(), 1024);
    send_fetch(second, 10 + i, (i % 2 ? silent_two : silent_one).address(), 1024);
  }
  ASSERT_TRUE(silent_one.wait_accepted(1) && silent_two.wait_accepted(1)) << b.log();
  b.signal(SIGTERM);
  // Generous: it took 97.6 s; wait_exit kills it past the bound (-1).
  EXPECT_EQ(b.wait_exit(5s), 0) << b.log();
}

// The error of a fetch from a service that is not a ferryd carried the
// first 4 bytes of its banner (as a frame length): fetch scanned ports.
TEST(FetchLimits, AServiceThatIsNotAFerrydEarnsOneGenericError) {
  const std::string banner = "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n";
  FerrydProcess b;
  Listener service(banner);
  const std::string closed = closed_address();
  TestClient client(b.port(), "tenant-scan");
  client.authenticate(FerrydProcess::default_token);
  send_fetch(client, 1, service.address(), 1024);
  const auto from_service = client.next_as<proto::PutAck>(60s);
  send_fetch(client, 2, closed, 1024);
  const auto from_closed = client.next_as<proto::PutAck>(60s);
  ASSERT_NE(from_service.status, proto::Status::ok);
  ASSERT_NE(from_closed.status, proto::Status::ok);
  std::uint32_t first4 = 0;
  std::memcpy(&first4, banner.data(), 4);
  for (const std::string& leak :
       {std::string("SSH"), std::string("OpenSSH"), std::to_string(first4), std::to_string(ntohl(first4))})
    EXPECT_EQ(from_service.message.find(leak), std::string::npos) << leak << " in: " << from_service.message;
  // The same words for a banner as for nothing at all, but the address.
  auto without = [](std::string text, const std::string& address) {
    for (auto at = text.find(address); at != std::string::npos; at = text.find(address))
      text.replace(at, address.size(), "ADDRESS");
    return text;
  };
  EXPECT_EQ(without(from_service.message, service.address()), without(from_closed.message, closed));
  // The operator still sees what answered.
  EXPECT_TRUE(b.wait_for_log("SSH") || b.wait_for_log("frame")) << b.log();
}

// Any host was dialled: a tenant could have ferryd reach what only it can
// (services behind the firewall, the cloud's metadata address).
TEST(FetchLimits, ASourceOutsideFetchFromIsRefusedWithoutADial) {
  FerrydProcess a;
  FerrydProcess b({"--fetch-from", a.address()});
  Listener other;  // on loopback too, on a port the operator did not name
  TestClient owner(a.port(), "tenant-owner"), fetcher(b.port(), "tenant-fetcher");
  owner.authenticate(FerrydProcess::default_token);
  fetcher.authenticate(FerrydProcess::default_token);
  const std::vector<std::byte> data(4096, std::byte{0x33});
  owner.put_all(1, proto::DType::u8, 1, data.size(), data.data(), data.size(), 1 << 20);

  send_fetch(fetcher, 1, other.address(), 1024);
  const auto refused = fetcher.next_as<proto::PutAck>(60s);
  EXPECT_NE(refused.status, proto::Status::ok);
  EXPECT_NE(refused.message.find("--fetch-from"), std::string::npos) << refused.message;
  EXPECT_EQ(other.accepted(), 0u) << "the source was dialled";

  // What the operator allowed still works.
  const auto secret = random_secret();
  owner.send(proto::GrantRead{owner.next_request(), 5, secret, fetcher.host_key(), 1, 0, data.size(), 60000});
  ASSERT_EQ(owner.next_as<proto::PutAck>().status, proto::Status::ok);
  send_fetch(fetcher, 2, a.address(), data.size(), 5, secret, owner.host_key());
  const auto ack = fetcher.next_as<proto::PutAck>(60s);
  EXPECT_EQ(ack.status, proto::Status::ok) << ack.message;
}

TEST(FetchLimits, AMistypedFetchFromIsABadCommandLine) {
  FerrydProcess b;
  for (const char* bad : {"10.0.0.0/99", "127.0.0.1:http", "loopback,,private", "no-such-host.invalid"}) {
    std::string output;
    EXPECT_EQ(FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", b.token_file().string(), "--gpus",
                                          "none", "--fetch-from", bad},
                                         &output),
              2)
        << bad;
    EXPECT_NE(output.find(std::string("--fetch-from '") + bad + "'"), std::string::npos) << output;
  }
}

// An error longer than the protocol carries (max_string_bytes) did not
// encode: the fetch was never answered.
TEST(FetchLimits, AnErrorTooLongToSendIsClippedAndAnswered) {
  FerrydProcess b;
  TestClient client(b.port(), "tenant-long");
  client.authenticate(FerrydProcess::default_token);
  // Not an address: the error names it, twice.
  send_fetch(client, 1, "127.0.0.1:" + std::string(1000, '9'), 1024);
  const auto ack = client.next_as<proto::PutAck>(30s);
  EXPECT_NE(ack.status, proto::Status::ok);
  EXPECT_LE(ack.message.size(), proto::max_string_bytes);
  EXPECT_TRUE(ack.message.starts_with("fetching from")) << ack.message;
  EXPECT_EQ(client.stats().replicas, 1u);  // the session goes on
}

// A source whose host key is not the pinned one was shown the capability
// before the fetch looked at the key: the source spent it, and the fetch
// with the right pin that followed was refused.
TEST(FetchLimits, AMispinnedSourceDoesNotSpendTheCapability) {
  Source hosts(4096);
  TestClient fetcher(hosts.b.port(), "tenant-pin");
  fetcher.authenticate(FerrydProcess::default_token);
  const auto secret = random_secret();
  hosts.grant(9, secret, fetcher.host_key());
  proto::Key wrong = hosts.a_key;
  wrong[0] ^= 1;
  send_fetch(fetcher, 2, hosts.a.address(), hosts.data.size(), 9, secret, wrong);
  const auto refused = fetcher.next_as<proto::PutAck>(60s);
  EXPECT_NE(refused.status, proto::Status::ok);
  EXPECT_NE(refused.message.find("pinned"), std::string::npos) << refused.message;
  send_fetch(fetcher, 2, hosts.a.address(), hosts.data.size(), 9, secret, hosts.a_key);
  const auto ack = fetcher.next_as<proto::PutAck>(60s);
  EXPECT_EQ(ack.status, proto::Status::ok) << ack.message;
}

// Fetch, then free, again and again: the fetches held every replica while
// the quota counted none of them (RSS 22 -> 817 MB with a 64 MiB quota).
TEST(FetchLimits, FreeingAReplicaBeingFetchedGivesItsMemoryBack) {
  FerrydProcess b({"--client-quota", "64MiB", "--memory-limit", "256MiB"});
  Listener silent;
  TestClient client(b.port(), "tenant-free");
  client.authenticate(FerrydProcess::default_token);
  constexpr std::size_t bytes = std::size_t{16} << 20;
  constexpr std::size_t rounds = 24;  // 384 MiB held, were the fetches to keep them
  const std::vector<std::byte> data(bytes, std::byte{0x77});
  put_whole(client, 1000, data);  // the pool's first slab
  client.send(proto::Free{1000});
  const std::uint64_t rss_before = proc_status(b.pid(), "VmRSS");
  for (std::uint64_t i = 0; i < rounds; ++i) {
    // Written, so its pages count in the RSS.
    put_whole(client, i, data);
    send_fetch(client, i, silent.address(), bytes);
    client.send(proto::Free{i});
  }
  client.send(proto::StatsRequest{client.next_request()});
  for (;;) {
    auto received = client.next(60s);
    if (const auto* stats = std::get_if<proto::StatsReply>(&received.message)) {
      EXPECT_EQ(stats->memory_in_use, 0u);
      break;
    }
  }
  const std::uint64_t rss_after = proc_status(b.pid(), "VmRSS");
  std::printf("RSS: %llu kB before, %llu kB after %zu rounds\n", static_cast<unsigned long long>(rss_before),
              static_cast<unsigned long long>(rss_after), rounds);
  EXPECT_LT(rss_after, rss_before + (128u << 10)) << "RSS " << rss_before << " kB -> " << rss_after << " kB";
}

}  // namespace
