// The client's half of the handshake as steps, apart from the socket it
// runs on: dial() drives it on a socket it connected (blocking), and a
// bootstrap listening for ferryd hosts that dial out (--connect) drives it
// on the sockets it accepted, one poll loop for all of them. The protocol
// roles are the same either way: the client speaks first and ferryd proves
// its host key (docs/protocol.md, "Reverse connections").
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "ferry/transport/bootstrap.hpp"
#include "handshake.hpp"

namespace ferry::transport {

class ClientHandshake {
 public:
  // `where` names ferryd in errors and in the known hosts (dialled: the
  // address asked for). `reverse`: ferryd dialled us, so its address says
  // nothing and the host key itself must be listed in the known hosts
  // (identity mode), or ferryd must prove the token (token mode).
  // `lane`: what this end offers (shared_memory_lane_possible on its socket).
  ClientHandshake(const DialOptions& options, std::string where, bool reverse,
                  protocol::Lane lane = protocol::Lane::none);

  // The first frame's body.
  const std::vector<std::byte>& hello() const noexcept { return hello_body_; }
  // The challenge's body, checked: the auth's body to send. Throws DialRefused.
  // `socket_fd`, the bootstrap socket, tells whether the process ferryd
  // names as its own is the one at the other end.
  std::vector<std::byte> on_challenge(std::vector<std::byte> challenge_body, int socket_fd,
                                      const Worker::Addresses& mine);
  // The sealed answer to auth: the UCX connection to ferryd, on `worker`.
  // `socket_name` is the peer's address (plaintext is allowed on loopback only).
  Dialed on_welcome(std::span<const std::byte> sealed, const std::shared_ptr<Worker>& worker,
                    const std::string& socket_name, Connection::MessageHandler on_message,
                    Connection::ErrorHandler on_error);
  const std::string& where() const noexcept { return where_; }

 private:
  const DialOptions& options_;
  std::string where_;
  bool reverse_;
  handshake::Exchange exchange_;
  protocol::Hello hello_;
  std::vector<std::byte> hello_body_, challenge_body_;
  protocol::Challenge challenge_;
  handshake::Digest digest_{};
  Cipher cipher_ = Cipher::xchacha20poly1305;
  std::unique_ptr<SecureChannel> channel_;
  pid_t server_pid_ = 0;  // the challenge's, proven on the bootstrap socket; 0: none
  Worker::Addresses mine_;  // sent in the auth: the endpoints are made on that UCX worker
};

}  // namespace ferry::transport
