// The bootstrap's dialling side: blocking, with one deadline for the lot.
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/worker.hpp"
#include "handshake.hpp"
#include "same_host.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {
namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket(const std::string& host, std::uint16_t port, Clock::time_point deadline) : deadline_(deadline) {
    sockaddr_storage address{};
    const auto length = resolve(host, port, address);
    name_ = format_sockaddr(address);
    fd_ = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw_system_error("socket", errno);
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
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  const std::string& name() const { return name_; }
  int fd() const { return fd_; }

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

  std::vector<std::byte> read_frame() {
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
      pollfd fd{fd_, events, 0};
      const int n = ::poll(&fd, 1, static_cast<int>(left));
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
        fail(fmt::format("{} closed the connection during the handshake", name_), UCS_ERR_CONNECTION_RESET);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait(POLLIN, "waiting for");
      } else if (errno != EINTR) {
        fail(fmt::format("connection to {} lost during the handshake: {}", name_, std::strerror(errno)));
      }
    }
  }

  int fd_ = -1;
  std::string name_;
  Clock::time_point deadline_;
};

[[noreturn]] void refused(const std::string& where, const protocol::ErrorMessage& error) {
  throw DialRefused(error.status, fmt::format("ferryd at {} refused this client: {}: {}", where, protocol::to_string(error.status),
                                handshake::printable(error.message, protocol::max_string_bytes)));
}

}  // namespace

Dialed dial(const std::shared_ptr<Worker>& worker, const std::string& host, std::uint16_t port,
            const DialOptions& options, Connection::MessageHandler on_message, Connection::ErrorHandler on_error) {
  if (worker->on_progress_thread()) throw UsageError("dial() blocks; not on the progress thread");
  if (!options.identity && options.token.empty())
    throw UsageError("connecting to ferryd needs a token or a key (ferry keygen)");
  const auto deadline = Clock::now() + options.timeout;
  Socket socket(host, port, deadline);
  const std::string where = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                                                 : fmt::format("{}:{}", host, port);

  handshake::Exchange exchange;
  protocol::Hello hello;
  hello.client = options.client;
  hello.privacy = options.privacy;
  hello.exchange = exchange.public_key;
  if (options.identity) hello.identity = options.identity->public_key();
  hello.aes_gcm = preferred_cipher() == Cipher::aes256gcm ? 1 : 0;
  if (shared_memory_lane_possible(socket.fd(), worker->transports())) hello.lane = protocol::Lane::shared_memory;
  const auto hello_body = protocol::encode(hello);
  socket.write_frame(hello_body);

  const auto challenge_body = socket.read_frame();
  auto message = protocol::decode(challenge_body);
  if (auto* error = std::get_if<protocol::ErrorMessage>(&message)) refused(where, *error);
  auto* challenge = std::get_if<protocol::Challenge>(&message);
  if (challenge == nullptr)
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} answered hello with {}, not a challenge", where,
                                  protocol::to_string(protocol::type_of(message))));
  if (!verify(challenge->host_key, handshake::challenge_digest(hello_body, *challenge), challenge->signature))
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {}: its challenge is not signed by the host key it presents ({}): "
                                  "refused",
                                  where, fingerprint(challenge->host_key)));
  if (!options.known_hosts.empty()) check_host_key(options.known_hosts, where, challenge->host_key, options.pinning);
  if (challenge->cipher == 0 && hello.aes_gcm == 0)
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} chose AES-256-GCM, which this CPU cannot do", where));
  const Cipher cipher = challenge->cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
  auto channel = handshake::client_channel(exchange, challenge->exchange, cipher);
  if (!channel) throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} sent an unusable key exchange: refused", where));

  const auto my_address = worker->address();
  const auto digest = handshake::auth_digest(hello_body, challenge_body, my_address);
  protocol::Auth auth;
  if (options.identity) {
    auth.signature = options.identity->sign(digest);
  } else {
    auth.mac = auth_mac(options.token, digest, "client");
  }
  auth.worker_address = my_address;
  socket.write_frame(protocol::encode(auth));

  const auto sealed = socket.read_frame();
  std::vector<std::byte> plain;
  std::uint64_t number = 0;
  if (!channel->open_header(sealed, 0, plain, number))
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {}: its answer to auth is not sealed with the agreed keys: refused", where));
  message = protocol::decode(plain);
  if (auto* error = std::get_if<protocol::ErrorMessage>(&message)) refused(where, *error);
  auto* welcome = std::get_if<protocol::Welcome>(&message);
  if (welcome == nullptr)
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} answered auth with {}, not a welcome", where,
                                  protocol::to_string(protocol::type_of(message))));
  if (!options.identity && !verify_mac(options.token, digest, "server", welcome->mac))
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} does not prove it knows the token: refused", where));
  const std::string ip = socket.name().substr(0, socket.name().rfind(':'));
  const bool loopback = is_loopback(ip.size() >= 2 && ip.front() == '[' ? ip.substr(1, ip.size() - 2) : ip);
  const bool may_be_plain = options.privacy == protocol::Privacy::plaintext ||
                            (options.privacy == protocol::Privacy::automatic && loopback);
  if (welcome->encrypted == 0 && !may_be_plain)
    throw DialRefused(protocol::Status::auth_failed, fmt::format("ferryd at {} offers an unencrypted link: refused (FERRY_PLAINTEXT=1 allows one "
                                  "on a trusted network)",
                                  where));
  if (welcome->encrypted == 0 && !loopback)
    log().warn("link to ferryd at {} is not encrypted (FERRY_PLAINTEXT)", where);

  Dialed dialed;
  dialed.host_key = challenge->host_key;
  dialed.cipher = cipher;
  if (welcome->lane != protocol::Lane::none && hello.lane != welcome->lane)
    throw DialRefused(protocol::Status::malformed,
                      fmt::format("ferryd at {} chose a lane this client did not offer", where));
  dialed.connection = Connection::to_worker(worker, welcome->worker_address, socket.name(),
                                            welcome->encrypted != 0 ? std::move(channel) : nullptr,
                                            std::move(on_message), std::move(on_error), welcome->lane);
  dialed.welcome = std::move(*welcome);
  return dialed;
}

}  // namespace ferry::transport
