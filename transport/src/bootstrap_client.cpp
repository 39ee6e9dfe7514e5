// The bootstrap's dialling side: blocking, with one deadline for the lot.
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/worker.hpp"
#include "client_handshake.hpp"
#include "handshake.hpp"
#include "same_host.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {
namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket(const std::string& host, std::uint16_t port, Clock::time_point deadline, const std::atomic<bool>* cancel)
      : deadline_(deadline), cancel_(cancel) {
    sockaddr_storage address{};
    socklen_t length = 0;
    try {
      length = resolve(host, port, address);
    } catch (const UcxError& e) {
      if (e.status() == UCS_ERR_INVALID_ADDR) throw Unresolvable(e.what(), e.status());
      throw;
    }
    name_ = format_sockaddr(address);
    fd_ = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw_system_error("socket", errno);
    // Closed by hand where the constructor throws (a refused connect, no
    // answer in time): ~Socket does not run then. Every refused redial of a
    // lost host used to leave one socket open in the client (the soak).
    try {
      connect_to(address, length);
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  const std::string& name() const { return name_; }
  int fd() const { return fd_; }

 private:
  void connect_to(const sockaddr_storage& address, socklen_t length) {
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0 && errno != EINPROGRESS)
      fail(fmt::format("cannot connect to {}: {}", name_, std::strerror(errno)));
    wait(POLLOUT, "connecting");
    int error = 0;
    socklen_t size = sizeof error;
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) fail(fmt::format("cannot connect to {}: {}", name_, std::strerror(error)));
  }

 public:
  void write_frame(std::span<const std::byte> body) {
    const auto frame = handshake::frame(body);
    std::size_t done = 0;
    while (done < frame.size()) {
      const ssize_t n = ::send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait(POLLOUT, "sending");
      } else if (n < 0 && errno != EINTR) {
        fail(fmt::format("connection to {} lost during the handshake: {}", name_, std::strerror(errno)));
      }
    }
  }

  // `what`: the frame awaited, to say how far the handshake got when the
  // server hangs up without a word (its log then says why).
  std::vector<std::byte> read_frame(const char* what) {
    what_ = what;
    std::byte prefix[4];
    read_exactly(prefix, sizeof prefix);
    const auto length = handshake::frame_length(prefix);
    if (length == 0 || length > handshake::max_frame_bytes)
      fail(fmt::format("{} is not a ferryd: it sent a frame of {} bytes", name_, length));
    std::vector<std::byte> body(length);
    read_exactly(body.data(), body.size());
    return body;
  }

 private:
  // UcxError, as a UCX endpoint that cannot connect would throw, so callers handle both alike.
  [[noreturn]] void fail(const std::string& what, ucs_status_t status = UCS_ERR_UNREACHABLE) const {
    throw UcxError(what, static_cast<int>(status));
  }

  void wait(short events, const char* doing) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) fail(fmt::format("{} {}: no answer in time", doing, name_), UCS_ERR_TIMED_OUT);
      if (cancel_ != nullptr && cancel_->load(std::memory_order_acquire))
        fail(fmt::format("{} {}: given up (shutting down)", doing, name_), UCS_ERR_CANCELED);
      pollfd fd{fd_, events, 0};
      const int n = ::poll(&fd, 1, static_cast<int>(cancel_ != nullptr ? std::min<long long>(left, 100) : left));
      if (n > 0) return;
      if (n < 0 && errno != EINTR) throw_system_error("poll", errno);
    }
  }

  void read_exactly(std::byte* out, std::size_t bytes) {
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::recv(fd_, out + done, bytes - done, 0);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
      } else if (n == 0) {
        fail(fmt::format("{} closed the connection during the handshake, without a word, where its {} was due "
                         "(the server's log says why)",
                         name_, what_),
             UCS_ERR_CONNECTION_RESET);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait(POLLIN, "waiting for");
      } else if (errno != EINTR) {
        fail(fmt::format("connection to {} lost during the handshake: {}", name_, std::strerror(errno)));
      }
    }
  }

  int fd_ = -1;
  std::string name_;
  const char* what_ = "answer";
  Clock::time_point deadline_;
  const std::atomic<bool>* cancel_ = nullptr;
};

}  // namespace

Dialed dial(const std::shared_ptr<Worker>& worker, const std::string& host, std::uint16_t port,
            const DialOptions& options, Connection::MessageHandler on_message, Connection::ErrorHandler on_error) {
  if (worker->on_progress_thread()) throw UsageError("dial() blocks; not on the progress thread");
  const auto deadline = Clock::now() + options.timeout;
  Socket socket(host, port, deadline, options.cancel);
  ClientHandshake handshake(options,
                            host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                                                : fmt::format("{}:{}", host, port),
                            false,
                            lane_to_offer(socket.fd(), worker->transports(), options.shared_memory_lane));
  socket.write_frame(handshake.hello());
  socket.write_frame(handshake.on_challenge(socket.read_frame("challenge"), socket.fd(), worker->addresses()));
  return handshake.on_welcome(socket.read_frame("welcome"), worker, socket.name(), std::move(on_message), std::move(on_error));
}

}  // namespace ferry::transport
