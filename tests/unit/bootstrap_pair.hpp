// A bootstrap listener and a dialing client on loopback with a test token:
// the way the transport tests get a real connected pair of UCX endpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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

// A listener (listen above) that keeps every connection it accepts, each
// handed `on_message` and `on_error`, and closes them all when it goes:
// once that returns no handler of theirs runs, so what they use may go next.
class Accepting {
 public:
  Accepting(const std::shared_ptr<Worker>& worker, Connection::MessageHandler on_message,
            Connection::ErrorHandler on_error)
      : listener(listen(worker, [this, on_message = std::move(on_message),
                                 on_error = std::move(on_error)](std::shared_ptr<Connection> c) {
          c->set_handlers(on_message, on_error);
          std::lock_guard lock(mutex_);
          accepted_.push_back(std::move(c));
        })) {}
  ~Accepting() {
    listener.reset();
    std::lock_guard lock(mutex_);
    for (auto& c : accepted_) c->close();
    accepted_.clear();
  }
  Accepting(const Accepting&) = delete;
  Accepting& operator=(const Accepting&) = delete;

  // The `i`th connection accepted (from 0), waiting up to 5 s for it; null if it never came.
  std::shared_ptr<Connection> connection(std::size_t i) {
    for (int tries = 0; tries < 500; ++tries) {
      {
        std::lock_guard lock(mutex_);
        if (accepted_.size() > i) return accepted_[i];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return nullptr;
  }

 private:
  // Before the listener: its accept handler uses them from the start.
  std::mutex mutex_;
  std::vector<std::shared_ptr<Connection>> accepted_;

 public:
  std::unique_ptr<BootstrapServer> listener;
};

}  // namespace ferry::transport::testing
