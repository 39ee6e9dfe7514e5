// The listening side's part of each peer's handshake, one frame at a time
// and never blocking: a client's hello -> challenge -> auth -> welcome,
// admitted as a Connection; or, on a runtime listening for ferryd hosts
// (reverse), the client's part (ClientHandshake) on the sockets it accepts.
// Each step moves a BootstrapPeer on; the poll loop owns the peers.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bootstrap_admission.hpp"
#include "bootstrap_peer.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::transport {

class ServerHandshake {
 public:
  // Throws UsageError when `options` (or `client`, reverse) allow no one in.
  ServerHandshake(std::shared_ptr<Worker> worker, const BootstrapServer::Options& options,
                  BootstrapServer::AcceptHandler on_accept, std::optional<DialOptions> client,
                  BootstrapServer::DialedHandler on_dialed, BootstrapAdmission& admission,
                  std::shared_ptr<const BootstrapWaker> waker);

  const PublicKey& host_key() const noexcept { return host_key_.public_key(); }
  // Whether this end plays the client's part on the sockets it accepts.
  bool reverse() const noexcept { return client_.has_value(); }

  // A socket just accepted: the reverse sends its hello first. False when
  // it could not start (logged; the caller closes the socket).
  bool start(BootstrapPeer& peer);
  // The socket is readable: reads what came and acts on every whole frame.
  void receive(BootstrapPeer& peer);
  // The socket is writable: writes what is waiting.
  void flush(BootstrapPeer& peer);
  // Wiring: sends the welcome once the UCX endpoint's wireup is done.
  void wired(BootstrapPeer& peer);
  // Ends a handshake this end gives up on, saying why where the peer can
  // read it: in place of the challenge before one was sent, sealed with the
  // session keys in place of the welcome after (the peer's key exchange is
  // known by then). Written only if the socket takes it at once: a peer that
  // reads nothing gets nothing, and costs nothing more.
  void tell_and_close(BootstrapPeer& peer, protocol::Status status, const std::string& why);

 private:
  using Stage = BootstrapPeer::Stage;

  // Not a Ferry client, or a broken one: closed without a word, since what
  // it would make of one is unknown.
  void garbage(BootstrapPeer& peer, const std::string& what);
  void send(BootstrapPeer& peer, std::span<const std::byte> body);
  // Says why and closes once that is on its way; sealed when keys exist.
  void refuse(BootstrapPeer& peer, Refusal reason, protocol::Status status, const std::string& why);
  // An error message to the peer, then the socket closes once it is on its way.
  void send_error(BootstrapPeer& peer, protocol::Status status, const std::string& why);
  void on_hello(BootstrapPeer& peer, std::vector<std::byte> body);
  void on_auth(BootstrapPeer& peer, std::span<const std::byte> body);
  // A ferryd that dialled in is authenticated both ways: its connection,
  // made on the progress thread so the handler sets its handlers before
  // anything arrives.
  void on_welcome(BootstrapPeer& peer, std::span<const std::byte> sealed);
  void admit(BootstrapPeer& peer, const Peer& who, const protocol::Bytes& client_address,
             const protocol::Bytes& client_network,
             const handshake::Digest& digest);

  std::shared_ptr<Worker> worker_;
  const BootstrapServer::Options& options_;
  BootstrapServer::AcceptHandler on_accept_;
  std::optional<DialOptions> client_;  // set: the client's part on accepted sockets
  BootstrapServer::DialedHandler on_dialed_;
  BootstrapAdmission& admission_;
  std::shared_ptr<const BootstrapWaker> waker_;
  KeyPair host_key_;
  bool aes_;
};

}  // namespace ferry::transport
