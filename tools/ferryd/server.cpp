#include "server.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "ferry/log.hpp"
#include "session.hpp"

namespace ferry::ferryd {

Server::Server(ServerState& state) : state_(state) {}

Server::~Server() {
  // Stopped first: what it posted runs before the call below (the queue is FIFO).
  if (reaper_.joinable()) {
    reaper_.request_stop();
    reaper_.join();
  }
  // Sessions hold connections of the worker; release them on its thread, as every UCX object must be.
  state_.worker->call([this] {
    listener_.reset();
    sessions_.clear();
  });
}

std::uint16_t Server::listen(const std::string& host, std::uint16_t port) {
  listener_ = transport::Listener::listen(state_.worker, host, port,
                                          [this](std::shared_ptr<transport::Connection> c) { accept(std::move(c)); });
  const auto period = std::clamp(state_.limits.handshake_timeout / 4, std::chrono::milliseconds(20),
                                 std::chrono::milliseconds(1000));
  reaper_ = std::jthread([this, period](std::stop_token stop) {
    std::mutex mutex;
    std::condition_variable_any cv;
    std::unique_lock lock(mutex);
    while (!stop.stop_requested()) {
      cv.wait_for(lock, stop, period, [] { return false; });  // wakes early when stop is requested
      if (!stop.stop_requested()) state_.worker->post([this] { reap(); });
    }
  });
  return listener_->port();
}

void Server::reap() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Session>> sessions;  // a copy: a dropped session leaves the map
  for (auto& [key, session] : sessions_) sessions.push_back(session);
  for (auto& session : sessions) session->enforce_handshake_deadline(now);
}

void Server::accept(std::shared_ptr<transport::Connection> connection) {
  if (state_.shutting_down) {
    connection->close();
    return;
  }
  log().debug("connection from {}", connection->peer());
  auto session = std::make_shared<Session>(state_, std::move(connection),
                                           [this](Session& s) { sessions_.erase(&s); });
  session->start();
  sessions_.emplace(session.get(), std::move(session));
}

std::size_t Server::shut_down(const std::string& why) {
  return state_.worker->call([this, &why] {
    state_.shutting_down = true;
    if (listener_) listener_->stop();
    // A copy: each session leaves the map as it closes.
    std::vector<std::shared_ptr<Session>> sessions;
    for (auto& [key, session] : sessions_) sessions.push_back(session);
    for (auto& session : sessions) session->shut_down(why);
    return sessions.size();
  });
}

}  // namespace ferry::ferryd
