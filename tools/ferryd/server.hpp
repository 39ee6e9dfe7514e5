// Accepts clients and keeps their sessions; shuts them all down on request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "ferry/transport/listener.hpp"
#include "server_state.hpp"

namespace ferry::ferryd {

class Session;

class Server {
 public:
  explicit Server(ServerState& state);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Not on the progress thread. Returns the port listened on.
  std::uint16_t listen(const std::string& host, std::uint16_t port);
  // Not on the progress thread: stops accepting, then tells every client
  // why and closes its connection. Returns how many clients there were.
  std::size_t shut_down(const std::string& why);

 private:
  void accept(std::shared_ptr<transport::Connection> connection);
  void reap();  // progress thread: drops sessions past their handshake deadline

  ServerState& state_;
  std::unique_ptr<transport::Listener> listener_;
  std::jthread reaper_;  // wakes now and then to post reap()
  std::unordered_map<const Session*, std::shared_ptr<Session>> sessions_;  // progress thread only
};

}  // namespace ferry::ferryd
