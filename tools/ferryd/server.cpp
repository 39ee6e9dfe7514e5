#include "server.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/heap_trim.hpp"
#include "ferry/log.hpp"
#include "session.hpp"

namespace ferry::ferryd {

void offer_devices(const ServerState& state, protocol::Welcome& welcome) {
  std::vector<std::string> keys;
  for (const auto& device : state.devices) {
    if (state.gpu_health->is_down(device.name)) continue;
    welcome.devices.push_back(device.description);
    keys.push_back(device.key);
    // Clients see the host as one device: its fastest one's rates (its
    // device probe's) seed their estimates.
    if (device.peak.flops_per_second > welcome.peak_flops) {
      welcome.peak_flops = device.peak.flops_per_second;
      welcome.peak_bytes = device.peak.bytes_per_second;
    }
  }
  welcome.device_key = fmt::format("{}", fmt::join(keys, " + "));
}

Server::Server(ServerState& state, KeyRing* keys) : state_(state), keys_(keys) {}

Server::~Server() {
  if (bootstrap_) bootstrap_->stop();
  stop_dialling();
  // First, and here: its thread may be waiting on the progress thread.
  bootstrap_.reset();
  // Sessions hold connections of the worker; release them on its thread, as every UCX object must be.
  state_.worker->call([this] { sessions_.clear(); });
}

std::uint16_t Server::listen(transport::BootstrapServer::Options options) {
  if (keys_ != nullptr) {
    options.authorize = [keys = keys_](const transport::PublicKey& key) -> std::optional<std::string> {
      if (auto grant = keys->find(key)) return grant->name;
      return std::nullopt;
    };
  }
  // Another ferryd reading what a client granted signs in with the grant's
  // secret and its host key; fetches from other hosts sign with this one's.
  options.capability_keys = [capabilities = state_.capabilities](std::uint64_t id) {
    return capabilities->keys(id);
  };
  if (!options.host_key) options.host_key = transport::KeyPair::generate();
  state_.host_key = *options.host_key;
  options.deadline = state_.limits.handshake_timeout;
  bootstrap_ = std::make_unique<transport::BootstrapServer>(
      state_.worker, std::move(options),
      [this](const transport::Peer& peer, std::shared_ptr<transport::Connection> connection) {
        return accept(peer, std::move(connection));
      },
      [this](const std::string& address, const std::string& client, transport::Refusal refusal, const std::string& why) {
        const char* reason = transport::to_string(refusal);
        state_.metrics.auth_failure(reason);
        if (state_.audit->enabled() && !client.empty())  // silent or garbage peers: the metric counts them
          state_.audit->record("authenticate", {{"peer", address}, {"client", client}, {"result", reason}, {"why", why}});
      });
  return bootstrap_->port();
}

protocol::Message Server::accept(const transport::Peer& peer, std::shared_ptr<transport::Connection> connection) {
  if (state_.shutting_down) return protocol::ErrorMessage{protocol::Status::shutting_down, "ferryd is shutting down"};
  Grant grant;
  if (peer.key) {
    // Looked up again: a reload may have withdrawn it since the bootstrap checked.
    auto found = keys_ != nullptr ? keys_->find(*peer.key) : std::nullopt;
    if (!found) return protocol::ErrorMessage{protocol::Status::auth_failed, "the key was withdrawn"};
    grant = std::move(*found);
  }
  // One use: the first peer in with a capability spends it, and reads that grant only.
  std::uint64_t capability_serial = 0;
  if (peer.capability) {
    const auto claimed = state_.capabilities->claim(*peer.capability);
    if (!claimed)
      return protocol::ErrorMessage{protocol::Status::auth_failed,
                                    fmt::format("capability {} was withdrawn or used", *peer.capability)};
    capability_serial = *claimed;
  }
  if (peer.dialled_out) {
    std::lock_guard lock(dial_mutex_);
    dialled_live_.insert(peer.address);
  }
  auto session = std::make_shared<Session>(state_, std::move(connection), peer, grant,
                                           [this, dialled = peer.dialled_out, address = peer.address](Session& s) {
                                             sessions_.erase(&s);
                                             HeapTrim::global().released();
                                             if (!dialled) return;
                                             std::lock_guard lock(dial_mutex_);
                                             dialled_live_.erase(dialled_live_.find(address));
                                             dial_cv_.notify_all();
                                           },
                                           capability_serial);
  session->start();
  if (state_.audit->enabled())
    state_.audit->record("authenticate", {{"peer", peer.address},
                                          {"client", peer.client},
                                          {"key", peer.key_name},
                                          {"result", "ok"},
                                          {"cipher", peer.encrypted ? transport::to_string(peer.cipher) : "plaintext"}});
  log().info("client {} authenticated ({}{})", session->describe(),
             peer.encrypted ? transport::to_string(peer.cipher) : "plaintext",
             peer.shared_memory ? ", shared-memory lane"
             : peer.bulk_lanes  ? ", bulk lanes"
                                : "");
  // A capability peer may only read what it was granted: it is offered nothing else.
  const bool reader = peer.capability.has_value();
  state_.gpu_health->check();
  protocol::Welcome welcome{state_.name, reader ? 0 : session->quota(), reader ? 0 : state_.cpu_workers,
                            grant.gpus && !reader ? state_.gpus_up() : 0, state_.limits.max_payload};
  offer_devices(state_, welcome);
  if (!reader) welcome.kernels = state_.kernels;
  else welcome.devices.clear();
  sessions_.emplace(session.get(), std::move(session));
  return welcome;
}

void Server::dial(const std::string& host, std::uint16_t port) {
  if (!bootstrap_) throw UsageError("ferryd dials clients through its bootstrap: listen() first");
  dialers_.emplace_back([this, host, port] { dial_loop(host, port); });
}

void Server::dial_loop(const std::string& host, std::uint16_t port) {
  constexpr auto first_backoff = std::chrono::milliseconds(250);
  constexpr auto max_backoff = std::chrono::seconds(30);
  auto backoff = std::chrono::milliseconds(first_backoff);
  bool warned = false;
  std::unique_lock lock(dial_mutex_);
  while (!stop_dialling_) {
    lock.unlock();
    std::string failure, address;
    bool answered = false;
    try {
      // The bootstrap calls the outcome once, whatever happens (even when it stops).
      address = bootstrap_->connect_out(host, port, [&](const std::string& why) {
        std::lock_guard inner(dial_mutex_);
        failure = why;
        answered = true;
        dial_cv_.notify_all();
      });
    } catch (const std::exception& e) {
      failure = e.what();
      answered = true;
    }
    lock.lock();
    dial_cv_.wait(lock, [&] { return answered; });
    if (failure.empty()) {
      log().info("connected to the client listening at {}", address);
      warned = false;
      backoff = first_backoff;
      dial_cv_.wait(lock, [&] { return stop_dialling_ || !dialled_live_.contains(address); });
      if (stop_dialling_) break;
      log().info("the client at {} went away; dialling it again", address);
    } else if (!std::exchange(warned, true)) {
      log().warn("cannot serve the client listening at {}:{}: {}; retrying with backoff", host, port, failure);
    } else {
      log().debug("dialling {}:{} again failed: {}", host, port, failure);
    }
    dial_cv_.wait_for(lock, backoff, [&] { return stop_dialling_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, max_backoff);
  }
}

void Server::stop_dialling() {
  {
    std::lock_guard lock(dial_mutex_);
    stop_dialling_ = true;
  }
  dial_cv_.notify_all();
  for (auto& dialer : dialers_) dialer.join();
  dialers_.clear();
}

std::size_t Server::shut_down(const std::string& why) {
  if (bootstrap_) bootstrap_->stop();
  stop_dialling();
  return state_.worker->call([this, &why] {
    state_.shutting_down = true;
    // A copy: each session leaves the map as it closes.
    std::vector<std::shared_ptr<Session>> sessions;
    for (auto& [key, session] : sessions_) sessions.push_back(session);
    for (auto& session : sessions) session->shut_down(why);
    return sessions.size();
  });
}

Server::Reloaded Server::reload_keys() {
  if (keys_ == nullptr) return {};
  keys_->reload();
  return state_.worker->call([this] {
    Reloaded reloaded;
    std::vector<std::shared_ptr<Session>> withdrawn;
    for (auto& [raw, session] : sessions_) {
      if (!session->key()) continue;
      auto grant = keys_->find(*session->key());
      if (!grant) {
        withdrawn.push_back(session);
      } else if (*grant != session->grant()) {
        session->regrant(std::move(*grant));
        ++reloaded.updated;
      }
    }
    for (auto& session : withdrawn) {
      log().info("client {}: its key was removed from {}; session ended", session->describe(),
                 keys_->path().string());
      session->shut_down("the client's key is no longer authorized");
    }
    reloaded.ended = withdrawn.size();
    return reloaded;
  });
}

}  // namespace ferry::ferryd
