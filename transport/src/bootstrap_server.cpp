// The bootstrap's listening side: one thread, poll over non-blocking
// sockets, nothing here blocks on a peer. The loop accepts what
// BootstrapAdmission lets in, hands each readable or writable socket to
// ServerHandshake (the per-peer state machine), and closes what ran past
// its deadline. The same loop serves ferryd's sockets that ferryd opened
// itself (--connect, connect_out), and, in a runtime that listens for such
// hosts, plays the client's part (client_handshake.hpp) on the sockets it
// accepts.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap_admission.hpp"
#include "bootstrap_peer.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/worker.hpp"
#include "server_handshake.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

using Clock = std::chrono::steady_clock;
using protocol::Status;

namespace {

// After accept() ran out of descriptors, the listening socket is left alone this long.
constexpr auto accept_pause = std::chrono::milliseconds(100);

std::string ip_of(const sockaddr_storage& address) {
  const auto text = format_sockaddr(address);
  const auto colon = text.rfind(':');
  auto ip = text.substr(0, colon);
  if (ip.size() >= 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
  return ip;
}

}  // namespace

class BootstrapServer::Impl {
 public:
  Impl(std::shared_ptr<Worker> worker, Options options, AcceptHandler on_accept, RefusedHandler on_refused,
       std::optional<DialOptions> client = std::nullopt, DialedHandler on_dialed = {})
      : options_(std::move(options)),
        admission_(options_, std::move(on_refused)),
        waker_(std::make_shared<BootstrapWaker>()),
        handshake_(std::move(worker), options_, std::move(on_accept), std::move(client), std::move(on_dialed),
                   admission_, waker_) {
    open_socket();
    int* wake_ = waker_->fds;
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      throw_system_error("pipe2", errno);
    }
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    stop();
    if (thread_.joinable()) thread_.join();
    for (auto& peer : pending_) ::close(peer->fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  void stop() {
    if (stopping_.exchange(true)) return;
    waker_->poke();
  }

  std::uint16_t port() const noexcept { return port_; }
  const PublicKey& host_key() const noexcept { return handshake_.host_key(); }

  // Reverse dial: ferryd opens the socket, and the client it reaches plays
  // the client's part on it.
  std::string connect_out(const std::string& host, std::uint16_t port, Outcome outcome) {
    if (handshake_.reverse()) throw UsageError("a bootstrap listening for ferryd hosts does not dial them");
    sockaddr_storage address{};
    const auto length = resolve(host, port, address);
    const auto text = format_sockaddr(address);
    const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(fmt::format("cannot connect to {}: socket: {}", text, std::strerror(errno)));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 && errno != EINPROGRESS) {
      const int error = errno;
      ::close(fd);
      throw Error(fmt::format("cannot connect to {}: {}", text, std::strerror(error)));
    }
    // Connected or not yet: the poll loop sees either the client's hello
    // or the error, and the deadline covers both.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto peer = std::make_unique<BootstrapPeer>();
    peer->fd = fd;
    peer->address = text;
    peer->deadline = Clock::now() + options_.deadline;
    peer->outcome = std::move(outcome);
    log().debug("bootstrap: connecting to {}", text);
    {
      std::lock_guard lock(outgoing_mutex_);
      if (closed_) {
        ::close(fd);
        throw Error(fmt::format("cannot connect to {}: the bootstrap stopped", text));
      }
      outgoing_.push_back(std::move(peer));
    }
    waker_->poke();
    return text;
  }

 private:
  void open_socket() {
    sockaddr_storage address{};
    const auto length = resolve(options_.host, options_.port, address);
    const auto text = format_sockaddr(address);
    listen_fd_ = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw Error(fmt::format("cannot listen on {}: socket: {}", text, std::strerror(errno)));
    // A restarted ferryd must listen on its old port at once, while the
    // connections of the one before linger in TIME_WAIT.
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
        ::listen(listen_fd_, 512) != 0) {
      const int error = errno;
      ::close(listen_fd_);
      throw Error(fmt::format("cannot listen on {}: {}", text, std::strerror(error)));
    }
    sockaddr_storage bound{};
    socklen_t bound_length = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_length);
    port_ = sockaddr_port(bound);
    log().debug("bootstrap: listening on {}", format_sockaddr(bound));
  }

  void run() {
    pthread_setname_np(pthread_self(), "ferry-bootstrap");
    std::vector<pollfd> fds;
    while (!stopping_) {
      const auto now = Clock::now();
      fds.clear();
      fds.push_back({waker_->fds[0], POLLIN, 0});
      const bool accepting = now >= paused_until_;
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      auto next = accepting ? Clock::time_point::max() : paused_until_;
      for (auto& peer : pending_) {
        short events = peer->out_done < peer->out.size() ? POLLOUT : 0;
        if (peer->stage != Stage::flushing && peer->stage != Stage::wiring) events |= POLLIN;
        fds.push_back({peer->fd, events, 0});
        next = std::min(next, peer->deadline);
      }
      int timeout = -1;
      if (next != Clock::time_point::max())
        timeout = static_cast<int>(std::clamp<std::int64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, 60000));
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
        log().error("bootstrap: poll: {}", std::strerror(errno));
        std::this_thread::sleep_for(accept_pause);
        continue;
      }
      if (fds[0].revents != 0) {
        char sink[64];
        while (::read(waker_->fds[0], sink, sizeof sink) > 0) {
        }
      }
      if (stopping_) break;
      {
        std::lock_guard lock(outgoing_mutex_);
        for (auto& peer : outgoing_) pending_.push_back(std::move(peer));
        outgoing_.clear();
      }
      // pending_ may grow below; fds covers the peers there were.
      const std::size_t polled = fds.size() - 2;
      for (std::size_t i = 0; i < polled; ++i) {
        auto& peer = *pending_[i];
        const short revents = fds[i + 2].revents;
        if ((revents & POLLOUT) != 0) handshake_.flush(peer);
        if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !peer.done) handshake_.receive(peer);
        if (peer.stage == Stage::wiring && !peer.done) handshake_.wired(peer);
      }
      if ((fds[1].revents & POLLIN) != 0) accept_all();
      reap(Clock::now());
    }
    // Stopped: new peers are refused by the kernel from now on, not left
    // waiting in a backlog nobody reads.
    ::close(listen_fd_);
    listen_fd_ = -1;
    {
      std::lock_guard lock(outgoing_mutex_);
      closed_ = true;  // connect_out refuses from now on: nobody would take its socket
      for (auto& peer : outgoing_) pending_.push_back(std::move(peer));
      outgoing_.clear();
    }
    for (auto& peer : pending_) {
      if (!peer->done) peer->failure = "the bootstrap stopped";
      ended(*peer);
    }
    pending_.clear();
  }

  // Closes the socket; tells whoever opened it how it went.
  void ended(BootstrapPeer& peer) {
    ::close(peer.fd);
    if (!peer.outcome) return;
    try {
      peer.outcome(peer.admitted ? std::string() : peer.failure.empty() ? "the handshake failed" : peer.failure);
    } catch (const std::exception& e) {
      log().error("bootstrap: outcome handler threw: {}", e.what());
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          admission_.out_of_descriptors(errno, accept_pause);
          paused_until_ = Clock::now() + accept_pause;
        }
        return;
      }
      const auto now = Clock::now();
      const auto text = format_sockaddr(address);
      const auto ip = ip_of(address);
      BootstrapPeer* evicted = nullptr;
      std::string why;
      if (!admission_.admit(fd, ip, text, now, pending_, evicted, why)) continue;
      if (evicted != nullptr) {
        admission_.closed(*evicted, Refusal::busy, why);
        handshake_.tell_and_close(*evicted, Status::busy, why);
        log().debug("bootstrap: {} evicted for {}", evicted->address, text);
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto peer = std::make_unique<BootstrapPeer>();
      peer->fd = fd;
      peer->address = text;
      peer->ip = ip;
      peer->opened = now;
      peer->deadline = now + options_.deadline;
      log().debug("bootstrap: connection from {}", text);
      if (!handshake_.start(*peer)) {
        ::close(fd);
        continue;
      }
      pending_.push_back(std::move(peer));
    }
  }

  void reap(Clock::time_point now) {
    for (auto& peer : pending_) {
      if (peer->done || now < peer->deadline) continue;
      const auto why = fmt::format("no handshake within {} ms", options_.deadline.count());
      admission_.closed(*peer, Refusal::handshake_timeout, why);
      handshake_.tell_and_close(*peer, Status::busy, why);
    }
    std::erase_if(pending_, [this](const std::unique_ptr<BootstrapPeer>& peer) {
      if (!peer->done) return false;
      ended(*peer);
      return true;
    });
  }

  using Stage = BootstrapPeer::Stage;

  Options options_;
  BootstrapAdmission admission_;
  std::shared_ptr<BootstrapWaker> waker_;
  ServerHandshake handshake_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<BootstrapPeer>> pending_;
  std::mutex outgoing_mutex_;
  std::vector<std::unique_ptr<BootstrapPeer>> outgoing_;  // connect_out's, for the thread to take
  bool closed_ = false;                                   // the thread is gone (outgoing_mutex_)
  Clock::time_point paused_until_{};
  std::thread thread_;
};
BootstrapServer::BootstrapServer(std::shared_ptr<Worker> worker, Options options, AcceptHandler on_accept,
                                 RefusedHandler on_refused)
    : impl_(std::make_unique<Impl>(std::move(worker), std::move(options), std::move(on_accept),
                                   std::move(on_refused))) {}
BootstrapServer::BootstrapServer(std::shared_ptr<Worker> worker, Options options, DialOptions client,
                                 DialedHandler on_dialed, RefusedHandler on_refused)
    : impl_(std::make_unique<Impl>(std::move(worker), std::move(options), AcceptHandler{}, std::move(on_refused),
                                   std::move(client), std::move(on_dialed))) {}
BootstrapServer::~BootstrapServer() = default;
std::string BootstrapServer::connect_out(const std::string& host, std::uint16_t port, Outcome outcome) {
  return impl_->connect_out(host, port, std::move(outcome));
}
std::uint16_t BootstrapServer::port() const noexcept { return impl_->port(); }
const PublicKey& BootstrapServer::host_key() const noexcept { return impl_->host_key(); }
void BootstrapServer::stop() { impl_->stop(); }

const char* to_string(Refusal reason) noexcept {
  switch (reason) {
    case Refusal::wrong_token: return "wrong_token";
    case Refusal::unknown_key: return "unknown_key";
    case Refusal::version_mismatch: return "version_mismatch";
    case Refusal::handshake_timeout: return "handshake_timeout";
    case Refusal::hung_up: return "hung_up";
    case Refusal::malformed: return "malformed";
    case Refusal::rate_limited: return "rate_limited";
    case Refusal::busy: return "busy";
    case Refusal::internal: return "internal";
  }
  return "malformed";
}

std::string capability_client(std::uint64_t id) { return std::string(capability_prefix) + std::to_string(id); }

namespace {
std::string claim_context(std::uint64_t capability) { return "claim:" + std::to_string(capability); }
}  // namespace

Mac claim_mac(std::string_view secret, const Nonce& binding, std::uint64_t capability) {
  return auth_mac(secret, binding, claim_context(capability));
}

bool verify_claim(std::string_view secret, const Nonce& binding, std::uint64_t capability, const Mac& mac) {
  return verify_mac(secret, binding, claim_context(capability), mac);
}

std::optional<std::uint64_t> capability_of(std::string_view client) {
  if (!client.starts_with(capability_prefix)) return std::nullopt;
  const std::string_view digits = client.substr(capability_prefix.size());
  std::uint64_t id = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  // One spelling per id: no sign, no leading zeros, nothing after the digits.
  if (error != std::errc{} || end != digits.data() + digits.size() || (digits.size() > 1 && digits[0] == '0'))
    return std::nullopt;
  return id;
}

bool is_loopback(const std::string& ip) {
  in_addr v4{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, ip.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

}  // namespace ferry::transport
