// What the transport tests share: byte helpers, an inbox a callback fills
// and a test waits on, an echo server and a collecting client joined over
// the bootstrap on loopback (bootstrap_pair.hpp), and UCX's eager or
// rendezvous choice set through its own knob.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../bootstrap_pair.hpp"
#include "../../support/scoped_env.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::transport::test_support {

using testing::connect;
using testing::listen;
using testing::test_token;


using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

inline Bytes text_bytes(const std::string& text) {
  Bytes bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

inline std::string bytes_text(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

inline Bytes random_bytes(std::size_t size, unsigned seed) {
  Bytes bytes(size);
  std::mt19937_64 engine(seed);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    auto word = engine();
    std::memcpy(bytes.data() + i, &word, 8);
  }
  for (; i < size; ++i) bytes[i] = static_cast<std::byte>(engine());
  return bytes;
}

// A thread-safe list of whatever a callback produced, waited on by the test.
template <typename T>
class Inbox {
 public:
  void push(T item) {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(item));
    changed_.notify_all();
  }
  // The first `count` items, or fewer if they do not come within `timeout`.
  std::vector<T> wait(std::size_t count, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return items_.size() >= count; });
    return {items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(std::min(count, items_.size()))};
  }
  std::size_t size() {
    std::lock_guard lock(mutex_);
    return items_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<T> items_;
};

struct Message {
  std::string header;
  Bytes payload;
  std::string error;  // from into()'s done
};

// Receives every message whole into an Inbox.
inline Connection::MessageHandler collect(Inbox<Message>& inbox) {
  return [&inbox](Connection&, Incoming& in) {
    auto message = std::make_shared<Message>();
    message->header = bytes_text(in.header());
    if (in.payload_bytes() == 0) {
      inbox.push(std::move(*message));
      return;
    }
    message->payload.resize(in.payload_bytes());
    in.into(message->payload.data(), [&inbox, message](const std::string& error) {
      message->error = error;
      inbox.push(std::move(*message));
    });
  };
}

// Sends every message back as it came, once its payload is in.
inline void echo(Connection& connection, Incoming& in) {
  Bytes header(in.header().begin(), in.header().end());
  if (in.payload_bytes() == 0) {
    connection.send(std::move(header));
    return;
  }
  auto payload = std::make_shared<Bytes>(in.payload_bytes());
  in.into(payload->data(), [self = connection.shared_from_this(), header, payload](const std::string& error) mutable {
    if (!error.empty()) return;
    self->send(std::move(header), payload->data(), payload->size(), [payload](const std::string&) {});
  });
}

using testing::connect;
using testing::listen;
using testing::test_token;

// The server end: each connection it accepts handled by `on_message`, its
// errors collected.
struct Server {
  explicit Server(Connection::MessageHandler on_message = echo)
      : worker(Worker::create({"server"})),
        accepting(worker, std::move(on_message), [this](Connection& connection, const std::string& reason) {
          errors.push(connection.peer() + " " + reason);
        }) {}
  std::shared_ptr<Connection> connection(std::size_t i) { return accepting.connection(i); }

  std::shared_ptr<Worker> worker;
  Inbox<std::string> errors;  // before accepting: filled until its connections close
  testing::Accepting accepting;
  std::unique_ptr<BootstrapServer>& listener = accepting.listener;
};

struct Client {
  explicit Client(std::uint16_t port, std::shared_ptr<Worker> shared = nullptr, bool shared_memory_lane = true)
      : worker(shared ? std::move(shared) : Worker::create({"client"})) {
    connection = connect(
        worker, port, collect(inbox), [this](Connection&, const std::string& reason) { errors.push(reason); },
        shared_memory_lane, &lane);
  }
  ~Client() { connection->close(); }
  std::shared_ptr<Worker> worker;
  Inbox<Message> inbox;
  Inbox<std::string> errors;
  protocol::Lane lane = protocol::Lane::none;
  std::shared_ptr<Connection> connection;
};

// Sends and returns what send's `done` said.
inline std::string send_and_wait(Connection& connection, Bytes header, const void* payload, std::size_t bytes) {
  Inbox<std::string> done;
  connection.send(std::move(header), payload, bytes, [&done](const std::string& error) { done.push(error); });
  auto result = done.wait(1, 30s);
  return result.empty() ? "send did not complete" : result[0];
}

// How UCX picks eager vs rendezvous, set through UCX's own knob before the
// workers read their configuration, like UCXX's tests vary progress modes.
enum class Protocol { automatic, eager, rendezvous };

using ferry::test::ScopedEnv;

inline const char* rndv_thresh(Protocol protocol) {
  switch (protocol) {
    case Protocol::eager:
      return "inf";
    case Protocol::rendezvous:
      return "0";
    default:
      return nullptr;
  }
}

// Why UCX here can give no shared-memory lane (the lane carries pulled
// payloads), or nullopt when it can.
inline std::optional<std::string> no_lane(const Worker& worker) {
  const std::string tls = worker.transports();
  if (tls.find("sysv") == std::string::npos && tls.find("posix") == std::string::npos)
    return "UCX's transports here (" + tls + ") have no shared memory";
  if (tls.find("cma") != std::string::npos) return "UCX_TLS names CMA, which rules the lane out";
  return std::nullopt;
}

}  // namespace ferry::transport::test_support
