#include "bootstrap_admission.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "handshake.hpp"

namespace ferry::transport {

using protocol::Status;

namespace {

// Lines about handshakes closed: at most this many per warn_period, then one
// saying how many went unlogged; a flood cannot fill the log.
constexpr int closed_lines_per_period = 20;

// Handshakes not yet closed.
std::size_t live_pending(const BootstrapAdmission::Pending& pending) {
  return static_cast<std::size_t>(std::count_if(pending.begin(), pending.end(), [](const auto& p) { return !p->done; }));
}

// Not authenticated, and accepted here (ferryd's own dials out are not
// strangers' to push out): may make room for a newer handshake.
bool evictable(const BootstrapPeer& peer) {
  using Stage = BootstrapPeer::Stage;
  if (peer.done || peer.outcome) return false;
  return peer.stage == Stage::hello || peer.stage == Stage::auth || peer.stage == Stage::challenge ||
         peer.stage == Stage::welcome;
}

}  // namespace

bool BootstrapAdmission::RateLimit::admit(const std::string& ip, Clock::time_point now) {
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

void BootstrapAdmission::RateLimit::forget_full(Clock::time_point now) {
  std::erase_if(buckets_, [&](const auto& entry) {
    return entry.second.tokens + std::chrono::duration<double>(now - entry.second.last).count() * rate_ >= burst_;
  });
}

BootstrapAdmission::BootstrapAdmission(const BootstrapServer::Options& options,
                                       BootstrapServer::RefusedHandler on_refused)
    : options_(options),
      on_refused_(std::move(on_refused)),
      limit_(options.per_address_rate, options.per_address_burst) {}

bool BootstrapAdmission::admit(int fd, const std::string& ip, const std::string& address, Clock::time_point now,
                               const Pending& pending, BootstrapPeer*& evicted, std::string& why) {
  evicted = nullptr;
  if (!limit_.admit(ip, now)) {
    ++refused_rate_;
    warn_now(last_rate_warning_, "bootstrap: {} connects too often (more than {}/s); refused {} so far", ip,
             options_.per_address_rate, refused_rate_);
    turn_away(fd, address, Refusal::rate_limited,
              fmt::format("{} opens connections too often (more than {}/s): try again shortly", ip,
                          options_.per_address_rate));
    return false;
  }
  if (!make_room(pending, ip, evicted, why)) {
    ++refused_full_;
    warn_now(last_full_warning_, "bootstrap: {} handshakes in progress, none of them evictable; refused {} ({} so far)",
             live_pending(pending), address, refused_full_);
    turn_away(fd, address, Refusal::busy,
              fmt::format("{} handshakes in progress, the most allowed: try again shortly", live_pending(pending)));
    return false;
  }
  return true;
}

void BootstrapAdmission::out_of_descriptors(int error, std::chrono::milliseconds pause) {
  warn_now(last_fd_warning_, "bootstrap: out of file descriptors ({}); not accepting for {} ms", std::strerror(error),
           pause.count());
}

// Past the cap on its address, its own oldest goes; past the cap on all,
// the oldest from the address holding the most (one that has not said
// hello before one that has).
bool BootstrapAdmission::make_room(const Pending& pending, const std::string& ip, BootstrapPeer*& victim,
                                   std::string& why) const {
  using Stage = BootstrapPeer::Stage;
  std::size_t live = 0, from_ip = 0;
  std::unordered_map<std::string_view, std::size_t> per_ip;
  for (const auto& p : pending) {
    if (p->done) continue;
    ++live;
    if (p->ip == ip) ++from_ip;
    if (evictable(*p)) ++per_ip[p->ip];
  }
  const bool address_full = from_ip >= std::max<std::size_t>(1, options_.max_pending_per_address);
  if (!address_full && live < options_.max_pending) return true;
  const auto before = [&](const BootstrapPeer& a, const BootstrapPeer& b) {
    if (!address_full && per_ip[a.ip] != per_ip[b.ip]) return per_ip[a.ip] > per_ip[b.ip];
    if ((a.stage == Stage::hello) != (b.stage == Stage::hello)) return a.stage == Stage::hello;
    return a.opened < b.opened;
  };
  for (auto& p : pending) {
    if (!evictable(*p) || (address_full && p->ip != ip)) continue;
    if (victim == nullptr || before(*p, *victim)) victim = p.get();
  }
  if (victim == nullptr) return false;
  why = address_full ? fmt::format("made room for a newer connection from its address ({} handshakes in progress "
                                   "from one address, the most allowed)",
                                   from_ip)
                     : fmt::format("made room for a newer connection ({} handshakes in progress, the most allowed)",
                                   live);
  return true;
}

void BootstrapAdmission::closed(BootstrapPeer& peer, Refusal reason, const std::string& why) {
  peer.failure = why;
  log_closed(peer.address, handshake::printable(peer.hello.client), reason, why);
  tell_handler(peer.address, handshake::printable(peer.hello.client, protocol::max_string_bytes), reason, why);
}

void BootstrapAdmission::turn_away(int fd, const std::string& address, Refusal reason, const std::string& why) {
  log_closed(address, {}, reason, why);
  tell_handler(address, {}, reason, why);
  const auto frame = handshake::frame(protocol::encode(protocol::ErrorMessage{Status::busy, why}));
  [[maybe_unused]] auto n = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void BootstrapAdmission::tell_handler(const std::string& address, const std::string& client, Refusal reason,
                                      const std::string& why) {
  if (!on_refused_) return;
  try {
    on_refused_(address, client, reason, why);
  } catch (const std::exception& e) {
    log().error("bootstrap: refusal handler threw: {}", e.what());
  }
}

void BootstrapAdmission::log_closed(const std::string& address, const std::string& client, Refusal reason,
                                    const std::string& why) {
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

}  // namespace ferry::transport
