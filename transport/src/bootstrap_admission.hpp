// Who may start a handshake with the bootstrap's listening side, and the
// record of the handshakes it closes: a token bucket per address, caps on
// handshakes in progress (the oldest stranger makes room for a newcomer),
// and warnings and log lines bounded, so that a flood cannot fill the log.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bootstrap_peer.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/bootstrap.hpp"

namespace ferry::transport {

class BootstrapAdmission {
 public:
  using Clock = std::chrono::steady_clock;
  using Pending = std::vector<std::unique_ptr<BootstrapPeer>>;

  BootstrapAdmission(const BootstrapServer::Options& options, BootstrapServer::RefusedHandler on_refused);

  // A connection just accepted from `ip` (`address` in full) among the
  // handshakes `pending`: whether it may start one. A refused one is told
  // why and closed here; a handshake it pushes out is left in `evicted`
  // (with why), for the caller to end.
  bool admit(int fd, const std::string& ip, const std::string& address, Clock::time_point now,
             const Pending& pending, BootstrapPeer*& evicted, std::string& why);

  // Every handshake this end closes comes here once: the handler hears
  // of it (metrics, audit) and the log says why, rate-limited.
  void closed(BootstrapPeer& peer, Refusal reason, const std::string& why);

  // accept() ran out of descriptors (errno `error`); warned at most once a period.
  void out_of_descriptors(int error, std::chrono::milliseconds pause);

 private:
  // A token bucket per IP address: `burst` connections at once, then `rate` per second.
  class RateLimit {
   public:
    RateLimit(double rate, double burst) : rate_(rate), burst_(burst) {}
    bool admit(const std::string& ip, Clock::time_point now);

   private:
    struct Bucket {
      double tokens;
      Clock::time_point last;
    };
    // A bucket that has refilled says nothing a fresh one would not.
    void forget_full(Clock::time_point now);
    double rate_, burst_;
    std::unordered_map<std::string, Bucket> buckets_;
  };

  // Room for one more handshake from `ip`: true with `victim` null when
  // there is room, with the handshake that must go (and why) when one
  // must; false when nothing may go.
  bool make_room(const Pending& pending, const std::string& ip, BootstrapPeer*& victim, std::string& why) const;
  // A connection refused as it is accepted: one frame saying why (the
  // client's hello has not been read; it hears this in place of a
  // challenge), written only if the socket takes it at once.
  void turn_away(int fd, const std::string& address, Refusal reason, const std::string& why);
  // A refusal of someone who proved nothing is not worth a warning, and
  // whatever a peer makes us log is bounded.
  void log_closed(const std::string& address, const std::string& client, Refusal reason, const std::string& why);
  void tell_handler(const std::string& address, const std::string& client, Refusal reason, const std::string& why);

  template <typename... Args>
  void warn_now(Clock::time_point& last, fmt::format_string<Args...> format, Args&&... args) {
    const auto now = Clock::now();
    if (now - last < warn_period) return;
    last = now;
    log().warn(format, std::forward<Args>(args)...);
  }

  // Warnings about a flood are repeated at most this often.
  static constexpr auto warn_period = std::chrono::seconds(10);

  const BootstrapServer::Options& options_;
  BootstrapServer::RefusedHandler on_refused_;
  RateLimit limit_;
  Clock::time_point last_fd_warning_{}, last_rate_warning_{}, last_full_warning_{};
  std::uint64_t refused_rate_ = 0, refused_full_ = 0;
  Clock::time_point closed_period_start_{};
  int closed_logged_ = 0;
  std::uint64_t closed_unlogged_ = 0;
};

}  // namespace ferry::transport
