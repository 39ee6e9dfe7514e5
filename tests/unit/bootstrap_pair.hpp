// A bootstrap listener and a dialing client on loopback with a test token:
// the way the transport tests get a real connected pair of UCX endpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::transport::testing {

inline constexpr const char* test_token = "transport test token";

// A bootstrap listener on a free loopback port taking the test token.
inline std::unique_ptr<BootstrapServer> listen(const std::shared_ptr<Worker>& worker,
                                               std::function<void(std::shared_ptr<Connection>)> on_accept,
                                               std::uint16_t port = 0) {
  BootstrapServer::Options options;
  options.host = "127.0.0.1";
  options.port = port;
  options.token = test_token;
  return std::make_unique<BootstrapServer>(
      worker, std::move(options), [on_accept](const Peer&, std::shared_ptr<Connection> c) -> protocol::Message {
        on_accept(std::move(c));
        return protocol::Welcome{};
      });
}

// `lane`, when given, learns what the two ends agreed on: which messages
// keep their order with which depends on it (protocol.md, "Bulk lanes").
inline std::shared_ptr<Connection> connect(const std::shared_ptr<Worker>& worker, std::uint16_t port,
                                           Connection::MessageHandler on_message, Connection::ErrorHandler on_error,
                                           bool shared_memory_lane = true, protocol::Lane* lane = nullptr) {
  DialOptions options;
  options.shared_memory_lane = shared_memory_lane;
  options.token = test_token;
  options.timeout = std::chrono::seconds(10);
  auto dialed = dial(worker, "127.0.0.1", port, options, std::move(on_message), std::move(on_error));
  if (lane != nullptr) *lane = dialed.welcome.lane;
  return std::move(dialed.connection);
}

}  // namespace ferry::transport::testing
