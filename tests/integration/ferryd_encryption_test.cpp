// Sealed links between a client and a real ferryd: what goes over the
// loopback wire, read by a raw packet capture, never shows the data.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

// Every frame on `lo` while it lives (AF_PACKET: needs CAP_NET_RAW), searched for a marker.
class LoopbackCapture {
 public:
  explicit LoopbackCapture(std::string marker) : marker_(std::move(marker)) {
    fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd_ < 0) {
      why_ = std::string("a raw socket: ") + std::strerror(errno);
      return;
    }
    const int buffer = 32 << 20;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
    sockaddr_ll where{};
    where.sll_family = AF_PACKET;
    where.sll_protocol = htons(ETH_P_ALL);
    where.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
      why_ = std::string("binding to lo: ") + std::strerror(errno);
      return;
    }
    thread_ = std::thread([this] { run(); });
  }
  ~LoopbackCapture() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& unavailable() const { return why_; }
  bool seen() const { return seen_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void run() {
    std::vector<char> packet(1 << 17);
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, packet.data(), packet.size(), 0);
      if (n <= 0) continue;
      bytes_ += static_cast<std::size_t>(n);
      if (memmem(packet.data(), static_cast<std::size_t>(n), marker_.data(), marker_.size()) != nullptr) seen_ = true;
    }
  }
  std::string marker_;
  std::string why_;
  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false}, seen_{false};
  std::atomic<std::size_t> bytes_{0};
};

// UCX between two processes on one host would use shared memory, which no
// capture sees: these tests make it use TCP, as between two hosts.
class FerrydCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("UCX_TLS")) saved_ = old;
    ::setenv("UCX_TLS", "tcp", 1);
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("UCX_TLS", saved_->c_str(), 1);
    } else {
      ::unsetenv("UCX_TLS");
    }
  }
  std::optional<std::string> saved_;
};

std::string random_marker() {
  std::random_device device;
  std::string marker = "FERRY-MARKER-";
  for (int i = 0; i < 16; ++i) marker += static_cast<char>('a' + device() % 26);
  return marker;
}

// Ships `bytes` full of `marker` to ferryd and back; true when both capture
// and round trip worked.
void ship(TestClient& client, const std::string& marker, std::size_t bytes, std::uint64_t chunk) {
  std::vector<std::byte> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>(marker[i % marker.size()]);
  client.put_all(1, proto::DType::u8, 1, bytes, data.data(), bytes, chunk);
  std::vector<std::byte> back;
  for (std::uint64_t offset = 0; offset < bytes; offset += chunk) {
    auto part = client.get(1, offset, std::min<std::uint64_t>(chunk, bytes - offset));
    back.insert(back.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(back == data) << "the round trip changed the data";
}

TEST_F(FerrydCapture, PlaintextLoopbackShowsTheMarkerSoTheCaptureWorks) {
  const auto marker = random_marker();
  FerrydProcess server;
  LoopbackCapture capture(marker);
  if (!capture.unavailable().empty()) GTEST_SKIP() << "no capture of loopback traffic: " << capture.unavailable();
  TestClient client(server.port());
  const auto welcome = client.authenticate(FerrydProcess::default_token);
  EXPECT_FALSE(client.encrypted()) << "loopback is plaintext by default";
  ship(client, marker, 4 << 20, std::min<std::uint64_t>(welcome.max_payload, 1 << 20));
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(capture.seen()) << "the capture saw " << capture.bytes() << " bytes and no marker: it cannot tell";
}

TEST_F(FerrydCapture, SealedLinkNeverShowsTheMarker) {
  const auto marker = random_marker();
  FerrydProcess server(std::vector<std::string>{"--encrypt-loopback"});
  LoopbackCapture capture(marker);
  if (!capture.unavailable().empty()) GTEST_SKIP() << "no capture of loopback traffic: " << capture.unavailable();
  TestClient client(server.port());
  const auto welcome = client.authenticate(FerrydProcess::default_token);
  EXPECT_TRUE(client.encrypted());
  ship(client, marker, 4 << 20, std::min<std::uint64_t>(welcome.max_payload, 1 << 20));
  std::this_thread::sleep_for(200ms);
  EXPECT_GT(capture.bytes(), std::size_t{4} << 20) << "the capture missed the transfer";
  EXPECT_FALSE(capture.seen()) << "the marker crossed the wire in plaintext";
}

TEST(FerrydEncryption, ClientAskingForEncryptionGetsItOnLoopback) {
  FerrydProcess server;
  TestClient client(server.port());
  transport::DialOptions options;
  options.token = FerrydProcess::default_token;
  options.privacy = proto::Privacy::encrypt;
  client.connect(options);
  EXPECT_TRUE(client.encrypted());
  const float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(client.put(1, proto::DType::f32, 1, 4, x, sizeof x).status, proto::Status::ok);
  const auto back = client.get(1, 0, sizeof x);
  EXPECT_EQ(std::memcmp(back.data(), x, sizeof x), 0);
  EXPECT_TRUE(server.wait_for_log("authenticated (")) << server.log();
}

}  // namespace
}  // namespace ferry::test
