// A plain TCP peer on loopback for tests of ferryd's front door: it sends
// whatever bytes a test likes and sees whether the server hangs up.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::test {

class RawPeer {
 public:
  explicit RawPeer(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
    }
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // False when the server already hung up.
  bool send(const void* data, std::size_t bytes) {
    return ::send(fd_, data, bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes);
  }
  bool send(const std::vector<std::byte>& bytes) { return send(bytes.data(), bytes.size()); }

  // Bytes until the server closes (or `timeout`); `closed` says which.
  std::vector<std::byte> read_until_closed(std::chrono::milliseconds timeout, bool& closed) {
    std::vector<std::byte> out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    closed = false;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      std::byte chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        closed = true;
        return out;
      }
      out.insert(out.end(), chunk, chunk + n);
    }
  }
  bool closed_within(std::chrono::milliseconds timeout) {
    bool closed = false;
    read_until_closed(timeout, closed);
    return closed;
  }

 private:
  int fd_ = -1;
};

}  // namespace ferry::test
