// Accepts clients through the bootstrap and keeps their sessions; shuts
// them all down on request, and ends those whose key was withdrawn.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "authorized_keys.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "server_state.hpp"

namespace ferry::ferryd {

class Session;

// What welcome tells a client of this host's devices: those up now (a GPU a
// sticky CUDA error took down is left out), their performance-model keys,
// and the fastest one's peak rates.
void offer_devices(const ServerState& state, protocol::Welcome& welcome);

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
  // After listen(): dials a client runtime that listens (--connect) and
  // serves it as any other client; redials with backoff whenever the
  // connection fails or the client goes away, until shut_down.
  void dial(const std::string& host, std::uint16_t port);
  // Not on the progress thread: stops accepting, then tells every client
  // why and closes its connection. Returns how many clients there were.
  std::size_t shut_down(const std::string& why);
  // Not on the progress thread: rereads the authorized keys (a bad file
  // keeps the old keys and throws UsageError), then ends the sessions of
  // keys no longer listed (with a Bye saying so) and gives the others
  // their key's options as they are now. Says how many of each.
  struct Reloaded {
    std::size_t ended = 0, updated = 0;
  };
  Reloaded reload_keys();

 private:
  protocol::Message accept(const transport::Peer& peer, std::shared_ptr<transport::Connection> connection);
  void dial_loop(const std::string& host, std::uint16_t port);
  void stop_dialling();

  ServerState& state_;
  KeyRing* keys_;
  std::unique_ptr<transport::BootstrapServer> bootstrap_;
  std::unordered_map<const Session*, std::shared_ptr<Session>> sessions_;  // progress thread only

  // --connect: one thread per client dialled; the addresses of the sessions
  // they opened that are still alive.
  std::mutex dial_mutex_;
  std::condition_variable dial_cv_;
  std::multiset<std::string> dialled_live_;
  bool stop_dialling_ = false;
  std::vector<std::thread> dialers_;
};

}  // namespace ferry::ferryd
