#include "server.hpp"

#include <vector>

#include "ferry/log.hpp"
#include "session.hpp"

namespace ferry::ferryd {

Server::Server(ServerState& state) : state_(state) {}

Server::~Server() {
  // Sessions hold connections of the worker; release them on its thread, as every UCX object must be.
  state_.worker->call([this] {
    listener_.reset();
    sessions_.clear();
  });
}

std::uint16_t Server::listen(const std::string& host, std::uint16_t port) {
  listener_ = transport::Listener::listen(state_.worker, host, port,
                                          [this](std::shared_ptr<transport::Connection> c) { accept(std::move(c)); });
  return listener_->port();
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
