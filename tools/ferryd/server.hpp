// Accepts clients through the bootstrap and keeps their sessions; shuts
// them all down on request, and ends those whose key was withdrawn.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "authorized_keys.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "server_state.hpp"

namespace ferry::ferryd {

class Session;

class Server {
 public:
  // `keys` (may be null: token only) must outlive the server.
  Server(ServerState& state, KeyRing* keys);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Not on the progress thread. Returns the port listened on. The options'
  // authorize is filled in from the key ring.
  std::uint16_t listen(transport::BootstrapServer::Options options);
  const transport::PublicKey& host_key() const { return bootstrap_->host_key(); }
  // Not on the progress thread: stops accepting, then tells every client
  // why and closes its connection. Returns how many clients there were.
  std::size_t shut_down(const std::string& why);
  // Not on the progress thread: rereads the authorized keys (a bad file
  // keeps the old keys and throws UsageError), then ends the sessions of
  // keys no longer listed. Returns how many ended.
  std::size_t reload_keys();

 private:
  protocol::Message accept(const transport::Peer& peer, std::shared_ptr<transport::Connection> connection);

  ServerState& state_;
  KeyRing* keys_;
  std::unique_ptr<transport::BootstrapServer> bootstrap_;
  std::unordered_map<const Session*, std::shared_ptr<Session>> sessions_;  // progress thread only
};

}  // namespace ferry::ferryd
