// One peer of the bootstrap's listening side while its handshake runs: its
// socket, the bytes that came and those still to go, and where the
// handshake stands. Owned by the poll loop (bootstrap_server.cpp), moved
// along by ServerHandshake, weighed by BootstrapAdmission.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "client_handshake.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/secure_channel.hpp"
#include "handshake.hpp"

namespace ferry::transport {

struct BootstrapPeer {
  using Clock = std::chrono::steady_clock;
  // A server's peer says hello then auth; a listening client's (reverse)
  // answers with a challenge then a welcome.
  // `wiring`: ferryd dialled out, its welcome waits for its UCX endpoint's wireup.
  enum class Stage { hello, auth, challenge, welcome, wiring, flushing };

  int fd = -1;
  std::string address;
  std::string ip;             // of address, for the per-address cap
  Clock::time_point opened;   // the oldest unauthenticated go first when room is needed
  Clock::time_point deadline;
  Stage stage = Stage::hello;
  std::vector<std::byte> in;
  std::vector<std::byte> out;
  std::size_t out_done = 0;
  bool done = false;  // closed, or to be
  std::vector<std::byte> hello_body, challenge_body;
  protocol::Hello hello;
  protocol::Challenge challenge;
  std::unique_ptr<handshake::Exchange> exchange;
  std::unique_ptr<SecureChannel> channel;
  std::unique_ptr<ClientHandshake> client;  // the client's part (reverse)
  BootstrapServer::Outcome outcome;          // a socket we opened: told how it ended
  bool admitted = false;
  std::string failure;  // why it ended, when not admitted
  std::string secret;  // token mode: what the welcome's MAC is keyed with (the token, or a capability's secret)
  std::vector<std::byte> welcome;               // wiring: sent once wired
  std::shared_ptr<std::atomic<int>> wired;      // wiring: 0 not yet, 1 done, 2 failed
};

// The poll loop's self-pipe; shared with callbacks that may outlive the
// loop (a flush's).
struct BootstrapWaker {
  int fds[2] = {-1, -1};
  ~BootstrapWaker() {
    if (fds[0] >= 0) ::close(fds[0]);
    if (fds[1] >= 0) ::close(fds[1]);
  }
  void poke() const {
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(fds[1], &byte, 1);
  }
};

}  // namespace ferry::transport
