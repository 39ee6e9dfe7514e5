// The bootstrap's listening side: one thread, poll over non-blocking
// sockets, a small state machine per peer (hello -> auth -> welcome) with a
// deadline; nothing here blocks on a peer. The same loop serves ferryd's
// sockets that ferryd opened itself (--connect), and, in a runtime that
// listens for such hosts, plays the client's part (client_handshake.hpp) on
// the sockets it accepts.
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
#include <charconv>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/worker.hpp"
#include "client_handshake.hpp"
#include "handshake.hpp"
#include "pull.hpp"
#include "same_host.hpp"
#include "worker_impl.hpp"
#include "worker_address.hpp"

namespace ferry::transport {

using Clock = std::chrono::steady_clock;
using protocol::Status;

namespace {

// Warnings about a flood are repeated at most this often.
constexpr auto warn_period = std::chrono::seconds(10);
// Lines about handshakes closed: at most this many per warn_period, then one
// saying how many went unlogged; a flood cannot fill the log.
constexpr int closed_lines_per_period = 20;
// After accept() ran out of descriptors, the listening socket is left alone this long.
constexpr auto accept_pause = std::chrono::milliseconds(100);

std::string ip_of(const sockaddr_storage& address) {
  const auto text = format_sockaddr(address);
  const auto colon = text.rfind(':');
  auto ip = text.substr(0, colon);
  if (ip.size() >= 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
  return ip;
}

bool all_zero(const protocol::Key& key) {
  return std::all_of(key.begin(), key.end(), [](std::uint8_t b) { return b == 0; });
}

// A token bucket per IP address: `burst` connections at once, then `rate` per second.
class RateLimit {
 public:
  RateLimit(double rate, double burst) : rate_(rate), burst_(burst) {}

  bool admit(const std::string& ip, Clock::time_point now) {
    if (buckets_.size() > 4096) forget_full(now);
    auto [it, fresh] = buckets_.try_emplace(ip, Bucket{burst_, now});
    auto& bucket = it->second;
    const double elapsed = std::chrono::duration<double>(now - bucket.last).count();
    bucket.tokens = std::min(burst_, bucket.tokens + elapsed * rate_);
    bucket.last = now;
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

 private:
  struct Bucket {
    double tokens;
    Clock::time_point last;
  };
  // A bucket that has refilled says nothing a fresh one would not.
  void forget_full(Clock::time_point now) {
    std::erase_if(buckets_, [&](const auto& entry) {
      return entry.second.tokens + std::chrono::duration<double>(now - entry.second.last).count() * rate_ >= burst_;
    });
  }
  double rate_, burst_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace

class BootstrapServer::Impl {
 public:
  Impl(std::shared_ptr<Worker> worker, Options options, AcceptHandler on_accept, RefusedHandler on_refused,
       std::optional<DialOptions> client = std::nullopt, DialedHandler on_dialed = {})
      : worker_(std::move(worker)),
        options_(std::move(options)),
        on_accept_(std::move(on_accept)),
        on_refused_(std::move(on_refused)),
        client_(std::move(client)),
        on_dialed_(std::move(on_dialed)),
        host_key_(options_.host_key ? *options_.host_key : KeyPair::generate()),
        limit_(options_.per_address_rate, options_.per_address_burst),
        aes_(preferred_cipher() == Cipher::aes256gcm) {
    if (client_) {
      if (client_->token.empty() && !client_->identity)
        throw UsageError("listening for ferryd hosts needs a token or a key (ferry keygen)");
    } else if (options_.token.empty() && !options_.authorize) {
      throw UsageError("the bootstrap needs a token, authorized keys, or both");
    }
    worker_address_ = worker_->address();
    open_socket();
    waker_ = std::make_shared<Waker>();
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
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(waker_->fds[1], &byte, 1);
  }

  std::uint16_t port() const noexcept { return port_; }
  const PublicKey& host_key() const noexcept { return host_key_.public_key(); }

  std::string connect_out(const std::string& host, std::uint16_t port, Outcome outcome) {
    if (client_) throw UsageError("a bootstrap listening for ferryd hosts does not dial them");
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
    auto peer = std::make_unique<Pending>();
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
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(waker_->fds[1], &byte, 1);
    return text;
  }

 private:
  // A server's peer says hello then auth; a listening client's (reverse)
  // answers with a challenge then a welcome.
  // `wiring`: ferryd dialled out, its welcome waits for its UCX endpoint's wireup.
  enum class Stage { hello, auth, challenge, welcome, wiring, flushing };
  struct Pending {
    int fd = -1;
    std::string address;
    std::string ip;             // of address, for the per-address cap
    Clock::time_point opened;   // the oldest unauthenticated go first when room is needed
    Clock::time_point deadline;
    Stage stage = Stage::hello;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    std::size_t out_done = 0;
    bool done = false;  // closed, or to be
    std::vector<std::byte> hello_body, challenge_body;
    protocol::Hello hello;
    protocol::Challenge challenge;
    std::unique_ptr<handshake::Exchange> exchange;
    std::unique_ptr<SecureChannel> channel;
    std::unique_ptr<ClientHandshake> client;  // the client's part (reverse)
    Outcome outcome;                           // a socket we opened: told how it ended
    bool admitted = false;
    std::string failure;  // why it ended, when not admitted
    std::string secret;  // token mode: what the welcome's MAC is keyed with (the token, or a capability's secret)
    std::vector<std::byte> welcome;               // wiring: sent once wired
    std::shared_ptr<std::atomic<int>> wired;      // wiring: 0 not yet, 1 done, 2 failed
  };

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
        if ((revents & POLLOUT) != 0) flush(peer);
        if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !peer.done) receive(peer);
        if (peer.stage == Stage::wiring && !peer.done) wired(peer);
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
  void ended(Pending& peer) {
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
          warn_now(last_fd_warning_, "bootstrap: out of file descriptors ({}); not accepting for {} ms",
                   std::strerror(errno), accept_pause.count());
          paused_until_ = Clock::now() + accept_pause;
        }
        return;
      }
      const auto now = Clock::now();
      const auto text = format_sockaddr(address);
      const auto ip = ip_of(address);
      if (!limit_.admit(ip, now)) {
        ++refused_rate_;
        warn_now(last_rate_warning_, "bootstrap: {} connects too often (more than {}/s); refused {} so far", ip,
                 options_.per_address_rate, refused_rate_);
        turn_away(fd, text, Refusal::rate_limited,
                  fmt::format("{} opens connections too often (more than {}/s): try again shortly", ip,
                              options_.per_address_rate));
        continue;
      }
      if (!make_room(ip, text)) {
        ++refused_full_;
        warn_now(last_full_warning_, "bootstrap: {} handshakes in progress, none of them evictable; refused {} ({} so far)",
                 live_pending(), text, refused_full_);
        turn_away(fd, text, Refusal::busy,
                  fmt::format("{} handshakes in progress, the most allowed: try again shortly", live_pending()));
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto peer = std::make_unique<Pending>();
      peer->fd = fd;
      peer->address = text;
      peer->ip = ip;
      peer->opened = now;
      peer->deadline = now + options_.deadline;
      log().debug("bootstrap: connection from {}", text);
      if (client_) {
        try {
          peer->client = std::make_unique<ClientHandshake>(*client_, text, true,
                                                           lane_to_offer(fd, worker_->transports(), true));
        } catch (const std::exception& e) {
          log().error("bootstrap: {}", e.what());
          ::close(fd);
          continue;
        }
        peer->stage = Stage::challenge;
        send(*peer, peer->client->hello());
      }
      pending_.push_back(std::move(peer));
    }
  }

  template <typename... Args>
  void warn_now(Clock::time_point& last, fmt::format_string<Args...> format, Args&&... args) {
    const auto now = Clock::now();
    if (now - last < warn_period) return;
    last = now;
    log().warn(format, std::forward<Args>(args)...);
  }

  void reap(Clock::time_point now) {
    for (auto& peer : pending_) {
      if (peer->done || now < peer->deadline) continue;
      const auto why = fmt::format("no handshake within {} ms", options_.deadline.count());
      closed(*peer, Refusal::handshake_timeout, why);
      tell_and_close(*peer, Status::busy, why);
    }
    std::erase_if(pending_, [this](const std::unique_ptr<Pending>& peer) {
      if (!peer->done) return false;
      ended(*peer);
      return true;
    });
  }

  // Every handshake this end closes comes here once: the handler hears
  // of it (metrics, audit) and the log says why, rate-limited.
  void closed(Pending& peer, Refusal reason, const std::string& why) {
    peer.failure = why;
    log_closed(peer.address, handshake::printable(peer.hello.client), reason, why);
    if (!on_refused_) return;
    try {
      on_refused_(peer.address, handshake::printable(peer.hello.client, protocol::max_string_bytes), reason, why);
    } catch (const std::exception& e) {
      log().error("bootstrap: refusal handler threw: {}", e.what());
    }
  }

  // A refusal of someone who proved nothing is not worth a warning, and
  // whatever a peer makes us log is bounded.
  void log_closed(const std::string& address, const std::string& client, Refusal reason, const std::string& why) {
    const auto now = Clock::now();
    if (now - closed_period_start_ >= warn_period) {
      if (closed_unlogged_ > 0)
        log().info("bootstrap: {} more handshakes closed in the last {} s, not logged one by one", closed_unlogged_,
                   std::chrono::duration_cast<std::chrono::seconds>(warn_period).count());
      closed_period_start_ = now;
      closed_logged_ = 0;
      closed_unlogged_ = 0;
    }
    if (closed_logged_ >= closed_lines_per_period) {
      ++closed_unlogged_;
      return;
    }
    ++closed_logged_;
    const bool refusal = reason == Refusal::wrong_token || reason == Refusal::unknown_key ||
                         reason == Refusal::version_mismatch || reason == Refusal::internal;
    const auto who = client.empty() ? address : fmt::format("{} ({})", address, client);
    if (refusal) log().warn("bootstrap: refused {}: {}: {}", who, to_string(reason), handshake::printable(why));
    else log().info("bootstrap: dropped {}: {}: {}", who, to_string(reason), handshake::printable(why));
  }

  // Handshakes not yet closed.
  std::size_t live_pending() const {
    return static_cast<std::size_t>(std::count_if(pending_.begin(), pending_.end(), [](const auto& p) { return !p->done; }));
  }

  // Not authenticated, and accepted here (ferryd's own dials out are not
  // strangers' to push out): may make room for a newer handshake.
  static bool evictable(const Pending& peer) {
    if (peer.done || peer.outcome) return false;
    return peer.stage == Stage::hello || peer.stage == Stage::auth || peer.stage == Stage::challenge ||
           peer.stage == Stage::welcome;
  }

  // Room for one more handshake from `ip`: past the cap on its address, its
  // own oldest goes; past the cap on all, the oldest from the address
  // holding the most (one that has not said hello before one that has).
  // False when nothing may go.
  bool make_room(const std::string& ip, const std::string& newcomer) {
    std::size_t live = 0, from_ip = 0;
    std::unordered_map<std::string_view, std::size_t> per_ip;
    for (const auto& p : pending_) {
      if (p->done) continue;
      ++live;
      if (p->ip == ip) ++from_ip;
      if (evictable(*p)) ++per_ip[p->ip];
    }
    const bool address_full = from_ip >= std::max<std::size_t>(1, options_.max_pending_per_address);
    if (!address_full && live < options_.max_pending) return true;
    Pending* victim = nullptr;
    const auto before = [&](const Pending& a, const Pending& b) {
      if (!address_full && per_ip[a.ip] != per_ip[b.ip]) return per_ip[a.ip] > per_ip[b.ip];
      if ((a.stage == Stage::hello) != (b.stage == Stage::hello)) return a.stage == Stage::hello;
      return a.opened < b.opened;
    };
    for (auto& p : pending_) {
      if (!evictable(*p) || (address_full && p->ip != ip)) continue;
      if (victim == nullptr || before(*p, *victim)) victim = p.get();
    }
    if (victim == nullptr) return false;
    const auto why = address_full
                         ? fmt::format("made room for a newer connection from its address ({} handshakes in progress "
                                       "from one address, the most allowed)",
                                       from_ip)
                         : fmt::format("made room for a newer connection ({} handshakes in progress, the most allowed)",
                                       live);
    closed(*victim, Refusal::busy, why);
    tell_and_close(*victim, Status::busy, why);
    log().debug("bootstrap: {} evicted for {}", victim->address, newcomer);
    return true;
  }

  // A connection refused as it is accepted: one frame saying why (the
  // client's hello has not been read; it hears this in place of a
  // challenge), written only if the socket takes it at once.
  void turn_away(int fd, const std::string& address, Refusal reason, const std::string& why) {
    log_closed(address, {}, reason, why);
    if (on_refused_) {
      try {
        on_refused_(address, {}, reason, why);
      } catch (const std::exception& e) {
        log().error("bootstrap: refusal handler threw: {}", e.what());
      }
    }
    const auto frame = handshake::frame(protocol::encode(protocol::ErrorMessage{Status::busy, why}));
    [[maybe_unused]] auto n = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }

  // Ends a handshake this end gives up on, saying why where the peer can
  // read it: in place of the challenge before one was sent, sealed with the
  // session keys in place of the welcome after (the peer's key exchange is
  // known by then). Written only if the socket takes it at once: a peer that
  // reads nothing gets nothing, and costs nothing more.
  void tell_and_close(Pending& peer, Status status, const std::string& why) {
    peer.done = true;
    if (peer.client || peer.outcome) return;  // not a client of ours: it has its own reasons
    const auto message = protocol::encode(protocol::ErrorMessage{status, why});
    std::vector<std::byte> frame;
    if (peer.stage == Stage::hello) {
      frame = handshake::frame(message);
    } else if (peer.stage == Stage::auth && peer.exchange) {
      const Cipher cipher = peer.challenge.cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
      if (!peer.channel) peer.channel = handshake::server_channel(*peer.exchange, peer.hello.exchange, cipher);
      if (!peer.channel) return;
      frame = handshake::frame(peer.channel->seal(message, {}, nullptr));
    } else {
      return;
    }
    if (peer.out_done < peer.out.size()) return;  // something is still on its way: a frame would cut into it
    [[maybe_unused]] auto n = ::send(peer.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void receive(Pending& peer) {
    std::byte chunk[4096];
    bool hung_up = false;
    for (;;) {
      const ssize_t n = ::recv(peer.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        peer.in.insert(peer.in.end(), chunk, chunk + n);
        // A peer cannot make us hold more than one frame and a bit.
        if (peer.in.size() > 4 + handshake::max_frame_bytes + sizeof chunk) break;
        continue;
      }
      if (n == 0) {
        // ferryd's welcome comes with its end of the socket closing: read what came first.
        hung_up = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      closed(peer, Refusal::hung_up, fmt::format("the connection failed: {}", std::strerror(errno)));
      peer.done = true;
      return;
    }
    while (!peer.done && peer.stage != Stage::flushing && peer.in.size() >= 4) {
      const auto length = handshake::frame_length(peer.in.data());
      if (length == 0 || length > handshake::max_frame_bytes)
        return garbage(peer, fmt::format("a frame of {} bytes (at most {})", length, handshake::max_frame_bytes));
      if (peer.in.size() < 4 + length) break;
      std::vector<std::byte> body(peer.in.begin() + 4, peer.in.begin() + 4 + length);
      peer.in.erase(peer.in.begin(), peer.in.begin() + 4 + length);
      try {
        switch (peer.stage) {
          case Stage::hello: on_hello(peer, std::move(body)); break;
          case Stage::auth: on_auth(peer, body); break;
          case Stage::challenge:
            peer.stage = Stage::welcome;
            send(peer, peer.client->on_challenge(std::move(body), peer.fd, worker_address_));
            break;
          case Stage::welcome: on_welcome(peer, body); break;
          case Stage::wiring:
          case Stage::flushing: break;  // not read from in these stages
        }
      } catch (const ProtocolError& e) {
        return garbage(peer, e.what());
      } catch (const std::exception& e) {
        // The client's part: ferryd refused us, or we it (DialRefused names which and why).
        if (!peer.client) throw;
        const auto* refusal = dynamic_cast<const DialRefused*>(&e);
        const Refusal reason = refusal == nullptr                                        ? Refusal::malformed
                               : refusal->status == Status::version_mismatch             ? Refusal::version_mismatch
                               : refusal->status == Status::auth_failed                  ? Refusal::unknown_key
                                                                                         : Refusal::malformed;
        closed(peer, reason, e.what());  // names the peer
        if (dynamic_cast<const TurnedAway*>(&e) != nullptr) {
          // Said to ferryd in place of auth, so its log names the reason.
          send_error(peer, Status::auth_failed, e.what());
          return;
        }
        peer.done = true;
        return;
      }
    }
    if (hung_up && !peer.done) {
      closed(peer, Refusal::hung_up, "hung up during the handshake");
      peer.done = true;
    }
  }

  // Not a Ferry client, or a broken one: closed without a word, since what
  // it would make of one is unknown.
  void garbage(Pending& peer, const std::string& what) {
    closed(peer, Refusal::malformed, what);
    peer.done = true;
  }

  void send(Pending& peer, std::span<const std::byte> body) {
    auto frame = handshake::frame(body);
    peer.out.insert(peer.out.end(), frame.begin(), frame.end());
    flush(peer);
  }

  void flush(Pending& peer) {
    while (peer.out_done < peer.out.size()) {
      const ssize_t n = ::send(peer.fd, peer.out.data() + peer.out_done, peer.out.size() - peer.out_done,
                               MSG_NOSIGNAL);
      if (n > 0) {
        peer.out_done += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      peer.done = true;
      return;
    }
    if (peer.stage == Stage::flushing) peer.done = true;  // everything said: the socket's work is over
  }

  // Says why and closes once that is on its way; sealed when keys exist.
  void refuse(Pending& peer, Refusal reason, Status status, const std::string& why) {
    closed(peer, reason, why);
    send_error(peer, status, why);
  }

  // An error message to the peer, then the socket closes once it is on its way.
  void send_error(Pending& peer, Status status, const std::string& why) {
    const auto message = protocol::encode(protocol::ErrorMessage{status, why});
    peer.stage = Stage::flushing;
    if (peer.channel) {
      send(peer, peer.channel->seal(message, {}, nullptr));
    } else {
      send(peer, message);
    }
  }

  void on_hello(Pending& peer, std::vector<std::byte> body) {
    auto message = protocol::decode(body);
    auto* hello = std::get_if<protocol::Hello>(&message);
    if (hello == nullptr)
      return garbage(peer, fmt::format("a {} message where a hello belongs", protocol::to_string(protocol::type_of(message))));
    peer.hello = std::move(*hello);
    const std::uint16_t lowest = std::max(peer.hello.min_version, protocol::oldest_version);
    const std::uint16_t highest = std::min(peer.hello.max_version, protocol::version);
    if (highest < lowest)
      return refuse(peer, Refusal::version_mismatch, Status::version_mismatch,
                    fmt::format("ferryd speaks protocol versions {}-{}, the client {}-{}", protocol::oldest_version,
                                protocol::version, peer.hello.min_version, peer.hello.max_version));
    peer.hello_body = std::move(body);
    peer.exchange = std::make_unique<handshake::Exchange>();
    auto& challenge = peer.challenge;
    challenge.version = highest;
    challenge.nonce = random_nonce();
    challenge.exchange = peer.exchange->public_key;
    challenge.host_key = host_key_.public_key();
    challenge.cipher = aes_ && peer.hello.aes_gcm != 0 ? 0 : 1;
    // What the client may check against this socket while it is open: the
    // process it may pull payloads out of, once the lane is agreed.
    if (peer.hello.lane == protocol::Lane::shared_memory && pull::enabled() &&
        shared_memory_lane_possible(peer.fd, worker_->transports()))
      challenge.pid.value = static_cast<std::uint32_t>(::getpid());
    const auto digest = handshake::challenge_digest(peer.hello_body, challenge);
    challenge.signature = host_key_.sign(digest);
    peer.challenge_body = protocol::encode(challenge);
    peer.stage = Stage::auth;
    send(peer, peer.challenge_body);
  }

  void on_auth(Pending& peer, std::span<const std::byte> body) {
    auto message = protocol::decode(body);
    if (const auto* error = std::get_if<protocol::ErrorMessage>(&message); error != nullptr && peer.outcome) {
      // The listening client this ferryd dialled turned it away, and said why.
      peer.failure = "refused: " + handshake::printable(error->message, protocol::max_string_bytes);
      peer.done = true;
      return;
    }
    auto* auth = std::get_if<protocol::Auth>(&message);
    if (auth == nullptr)
      return garbage(peer, fmt::format("a {} message where an auth belongs", protocol::to_string(protocol::type_of(message))));
    const Cipher cipher = peer.challenge.cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
    peer.channel = handshake::server_channel(*peer.exchange, peer.hello.exchange, cipher);
    if (!peer.channel) return refuse(peer, Refusal::malformed, Status::auth_failed, "the client's key exchange is unusable");
    if (auth->worker_address.empty()) return refuse(peer, Refusal::malformed, Status::malformed, "auth carries no worker address");
    // Refused here, with a reason the client reads, before it could reach
    // UCX (Connection::to_worker would refuse it too, saying nothing to it).
    if (const std::string why = worker_address::check(auth->worker_address); !why.empty())
      return refuse(peer, Refusal::malformed, Status::malformed, "auth's UCX worker address is unusable: " + why);
    const auto digest = handshake::auth_digest(peer.hello_body, peer.challenge_body, auth->worker_address);

    Peer who;
    who.address = peer.address;
    who.dialled_out = static_cast<bool>(peer.outcome);
    who.client = handshake::printable(peer.hello.client);
    if (const auto capability = capability_of(peer.hello.client)) {
      // Another ferryd fetching what a client granted: it proves it knows
      // the capability's secret (its token, so it never crosses the wire
      // either) and that it is the host the client named (a signature by
      // that host key): the secret alone, were it to leak, lets no one in.
      // One answer whether the id is unknown or its secret wrong: a stranger
      // learns nothing of which ids are live.
      auto keys = options_.capability_keys ? options_.capability_keys(*capability) : std::nullopt;
      if (!keys || !verify_mac(keys->secret, digest, "client", auth->mac))
        return refuse(peer, Refusal::wrong_token, Status::auth_failed,
                      fmt::format("capability {} is unknown, expired or used, or its secret is wrong", *capability));
      const PublicKey key = peer.hello.identity;
      if (all_zero(key) || key != keys->reader)
        return refuse(peer, Refusal::unknown_key, Status::auth_failed,
                      fmt::format("capability {} was granted to host key {}, and this peer {}", *capability,
                                  fingerprint(keys->reader),
                                  all_zero(key) ? std::string("presents none") : "presents " + fingerprint(key)));
      if (!verify(key, digest, auth->signature))
        return refuse(peer, Refusal::unknown_key, Status::auth_failed,
                      fmt::format("the signature by host key {} does not verify", fingerprint(key)));
      who.key_name = "capability";  // not an authorized key: `key` stays empty
      who.capability = capability;
      who.reader = key;
      peer.secret = std::move(keys->secret);
    } else if (!all_zero(peer.hello.identity)) {
      const PublicKey key = peer.hello.identity;
      if (!options_.authorize)
        return refuse(peer, Refusal::unknown_key, Status::auth_failed, "this ferryd takes the shared token, not keys");
      auto name = options_.authorize(key);
      if (!name) return refuse(peer, Refusal::unknown_key, Status::auth_failed, fmt::format("key {} is not authorized", fingerprint(key)));
      if (!verify(key, digest, auth->signature))
        return refuse(peer, Refusal::unknown_key, Status::auth_failed, fmt::format("the signature by key {} ({}) does not verify",
                                                             *name, fingerprint(key)));
      who.key_name = std::move(*name);
      who.key = key;
    } else {
      if (options_.token.empty())
        return refuse(peer, Refusal::wrong_token, Status::auth_failed, "this ferryd takes authorized keys only; the client sent no key");
      if (!verify_mac(options_.token, digest, "client", auth->mac))
        return refuse(peer, Refusal::wrong_token, Status::auth_failed, "authentication failed: the client's token is not ferryd's");
      who.key_name = "token";
      peer.secret = options_.token;
    }
    const std::string ip = peer.address.substr(0, peer.address.rfind(':'));
    const bool loopback = is_loopback(ip.size() >= 2 && ip.front() == '[' ? ip.substr(1, ip.size() - 2) : ip);
    const bool client_allows = peer.hello.privacy == protocol::Privacy::plaintext ||
                               (peer.hello.privacy == protocol::Privacy::automatic && loopback);
    const bool server_allows = options_.allow_plaintext || (loopback && !options_.encrypt_loopback);
    who.encrypted = !(client_allows && server_allows);
    who.cipher = cipher;
    if (!who.encrypted && !loopback)
      log().warn("bootstrap: {} ({}) gets a plaintext link, as both ends chose (--plaintext)", who.address,
                 who.client);
    who.binding = digest;
    admit(peer, who, auth->worker_address, digest);
  }

  // A ferryd that dialled in is authenticated both ways: its connection,
  // made on the progress thread so the handler sets its handlers before
  // anything arrives.
  void on_welcome(Pending& peer, std::span<const std::byte> sealed) {
    worker_->call([&] {
      on_dialed_(peer.client->on_welcome(sealed, worker_, peer.address, {}, {}));
      return 0;
    });
    log().debug("bootstrap: ferryd dialled in from {}", peer.address);
    peer.admitted = true;
    peer.done = true;
  }

  void admit(Pending& peer, const Peer& who, const protocol::Bytes& client_address,
             const handshake::Digest& digest) {
    SecureChannel* seal = peer.channel.get();
    std::vector<std::byte> reply;
    std::shared_ptr<Connection> made;
    try {
      // On the progress thread at once: the connection's first sealed
      // message must follow the welcome's number, and nothing the session
      // sends can slip in between inside one posted function.
      reply = worker_->call([&] {
        // The client's offer where this end can take it: bulk lanes always.
        const protocol::Lane offer = peer.hello.lane;
        const protocol::Lane lane =
            offer == protocol::Lane::bulk ||
                    (offer == protocol::Lane::shared_memory && shared_memory_lane_possible(peer.fd, worker_->transports()))
                ? offer
                : protocol::Lane::none;
        // The client's payloads are pulled out of its process only once
        // that process is proven to be the one this socket talks to.
        const auto pid = static_cast<pid_t>(peer.hello.pid.value);
        const pid_t peer_pid =
            lane == protocol::Lane::shared_memory && pid > 0 && loopback_peer_is_process(peer.fd, pid) ? pid : 0;
        auto connection = Connection::to_worker(worker_, client_address, who.address,
                                                who.encrypted ? std::move(peer.channel) : nullptr, {}, {}, lane, true,
                                                peer_pid);
        Peer admitted = who;
        admitted.shared_memory = lane == protocol::Lane::shared_memory;
        admitted.bulk_lanes = lane == protocol::Lane::bulk;
        protocol::Message answer = on_accept_(admitted, connection);
        if (auto* welcome = std::get_if<protocol::Welcome>(&answer)) {
          if (!who.key) welcome->mac = auth_mac(peer.secret, digest, "server");
          welcome->encrypted = who.encrypted ? 1 : 0;
          welcome->worker_address = worker_address_;
          welcome->lane = lane;
          peer.admitted = true;
          made = connection;
        } else {
          connection->close();
        }
        return seal->seal(protocol::encode(answer), {}, nullptr);
      });
    } catch (const std::exception& e) {
      const auto why = fmt::format("this end could not admit it: {}", e.what());
      closed(peer, Refusal::internal, why);
      // Its keys are still here unless the connection took them: then
      // nothing the peer could open can be said.
      if (peer.channel) send_error(peer, Status::internal, why);
      else peer.done = true;
      return;
    }
    log().debug("bootstrap: {} ({}) in as {}, {}", who.address, who.client, who.key_name,
                who.encrypted ? to_string(who.cipher) : "plaintext");
    if (peer.outcome && made) {
      // We dialled out: the client may not be able to reach our UCX worker
      // (NAT), only answer on the connection ours opens to it. Its endpoint,
      // made when the welcome comes, takes that connection over once our
      // endpoint's wireup is done: so the welcome waits for it.
      peer.stage = Stage::wiring;
      peer.welcome = std::move(reply);
      peer.wired = std::make_shared<std::atomic<int>>(0);
      made->flush([wired = peer.wired, waker = waker_](const std::string& error) {
        wired->store(error.empty() ? 1 : 2);
        waker->poke();
      });
      return;
    }
    peer.stage = Stage::flushing;
    send(peer, reply);
  }

  void wired(Pending& peer) {
    const int state = peer.wired->load();
    if (state == 0) return;
    if (state == 2) {
      peer.admitted = false;
      closed(peer, Refusal::internal, "the UCX endpoint to it did not connect");
      peer.done = true;
      return;
    }
    peer.stage = Stage::flushing;
    send(peer, peer.welcome);
  }

  std::shared_ptr<Worker> worker_;
  Options options_;
  AcceptHandler on_accept_;
  RefusedHandler on_refused_;
  std::optional<DialOptions> client_;  // set: the client's part on accepted sockets
  DialedHandler on_dialed_;
  KeyPair host_key_;
  RateLimit limit_;
  bool aes_;
  std::vector<std::uint8_t> worker_address_;
  int listen_fd_ = -1;
  // The self-pipe; shared with callbacks that may outlive this (a flush's).
  struct Waker {
    int fds[2] = {-1, -1};
    ~Waker() {
      if (fds[0] >= 0) ::close(fds[0]);
      if (fds[1] >= 0) ::close(fds[1]);
    }
    void poke() const {
      const char byte = 1;
      [[maybe_unused]] auto n = ::write(fds[1], &byte, 1);
    }
  };
  std::shared_ptr<Waker> waker_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Pending>> pending_;
  std::mutex outgoing_mutex_;
  std::vector<std::unique_ptr<Pending>> outgoing_;  // connect_out's, for the thread to take
  bool closed_ = false;                             // the thread is gone (outgoing_mutex_)
  Clock::time_point paused_until_{};
  Clock::time_point last_fd_warning_{}, last_rate_warning_{}, last_full_warning_{};
  std::uint64_t refused_rate_ = 0, refused_full_ = 0;
  Clock::time_point closed_period_start_{};
  int closed_logged_ = 0;
  std::uint64_t closed_unlogged_ = 0;
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
