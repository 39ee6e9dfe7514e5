// A raw protocol client for tests: ferry::transport and the wire protocol,
// no runtime. Every arriving message (and its payload) is queued; a test
// sends, then takes what it expects from the queue.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <variant>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::test {

namespace proto = ferry::protocol;

struct Received {
  proto::Message message;
  std::vector<std::byte> payload;
};

class TestClient {
 public:
  // Connects at authenticate()/connect(): the bootstrap authenticates before UCX connects.
  explicit TestClient(std::uint16_t port, std::string name = "test:" + std::to_string(getpid()))
      : port_(port), name_(std::move(name)), state_(std::make_shared<State>()) {
    worker_ = transport::Worker::create({"test-client"});
  }
  ~TestClient() {
    if (connection_) connection_->close();
    connection_.reset();
    worker_.reset();
  }

  // Dials with `options` (its client name is this client's); throws what dial() throws.
  proto::Welcome connect(transport::DialOptions options) {
    options.client = name_;
    auto state = state_;
    auto dialed = transport::dial(
        worker_, "127.0.0.1", port_, options,
        [state](transport::Connection&, transport::Incoming& in) { receive(state, in); },
        [state](transport::Connection&, const std::string&) {
          std::lock_guard lock(state->mutex);
          state->closed = true;
          state->changed.notify_all();
        });
    connection_ = dialed.connection;
    host_key_ = dialed.host_key;
    binding_ = dialed.binding;
    return dialed.welcome;
  }
  proto::Welcome authenticate(const std::string& token) {
    transport::DialOptions options;
    options.token = token;
    return connect(options);
  }
  // Tries to sign in with `token`; a refusal is what the callers expect (they
  // look at what the server did about it).
  void handshake(const std::string& token) {
    transport::DialOptions options;
    options.token = token;
    try {
      connect(options);
    } catch (const Error&) {
    }
  }
  // Why the server (or this client) refused: the error's text; throws when it was welcomed.
  std::string refusal(transport::DialOptions options) {
    try {
      connect(std::move(options));
    } catch (const Error& e) {
      return e.what();
    }
    throw std::runtime_error("expected a refusal, got a welcome");
  }
  bool encrypted() const { return connection_ && connection_->encrypted(); }
  const transport::PublicKey& host_key() const { return host_key_; }
  // What a claim on this connection proves its secret over.
  const transport::Nonce& binding() const { return binding_; }

  // Sends and waits until the payload (if any) is on its way.
  void send(const proto::Message& message, const void* payload = nullptr, std::size_t bytes = 0) {
    send_raw(proto::encode(message), payload, bytes);
  }
  // Sends without waiting: for payloads the server may refuse to take. `payload` must outlive the client.
  void send_async(const proto::Message& message, const void* payload, std::size_t bytes) {
    connection_->send(proto::encode(message), payload, bytes, {});
  }
  void send_raw(std::vector<std::byte> header, const void* payload = nullptr, std::size_t bytes = 0) {
    auto sent = std::make_shared<std::promise<std::string>>();
    auto future = sent->get_future();
    connection_->send(std::move(header), payload, bytes, [sent](const std::string& e) { sent->set_value(e); });
    if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      throw std::runtime_error("send did not complete");
    if (auto error = future.get(); !error.empty()) throw std::runtime_error("send failed: " + error);
  }

  // The next message, in arrival order; throws after `timeout`.
  Received next(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(state_->mutex);
    if (!state_->changed.wait_for(lock, timeout, [&] { return !state_->queue.empty(); }))
      throw std::runtime_error("no message arrived in time");
    Received r = std::move(state_->queue.front());
    state_->queue.pop_front();
    return r;
  }
  template <typename M>
  M next_as(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    Received r = next(timeout);
    if (!std::holds_alternative<M>(r.message))
      throw std::runtime_error(std::string("expected another message, got ") +
                               proto::to_string(proto::type_of(r.message)) + describe(r.message));
    return std::get<M>(std::move(r.message));
  }

  // Closed by the peer (never connected counts as closed).
  bool wait_closed(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (!connection_) return true;
    std::unique_lock lock(state_->mutex);
    return state_->changed.wait_for(lock, timeout, [&] { return state_->closed; });
  }
  // Waits until every payload whose header came has landed (or the
  // connection closed): closing the client with one still arriving leaves
  // that receive to UCX forever.
  bool wait_payloads(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(state_->mutex);
    return state_->changed.wait_for(lock, timeout, [&] { return state_->arriving == 0 || state_->closed; });
  }


  proto::PutAck put(std::uint64_t id, proto::DType dtype, std::uint64_t rows, std::uint64_t cols, const void* data,
                    std::uint64_t bytes, std::uint64_t offset = 0) {
    send(proto::Put{++request_, id, dtype, rows, cols, offset}, data, bytes);
    return next_as<proto::PutAck>();
  }
  // Every byte of a replica, in chunks of at most `chunk` bytes each way.
  void put_all(std::uint64_t id, proto::DType dtype, std::uint64_t rows, std::uint64_t cols, const void* data,
               std::uint64_t bytes, std::uint64_t chunk);
  std::vector<std::byte> get(std::uint64_t id, std::uint64_t offset, std::uint64_t length) {
    send(proto::Get{++request_, id, offset, length});
    Received r = next();
    auto* data = std::get_if<proto::Data>(&r.message);
    if (data == nullptr || data->status != proto::Status::ok)
      throw std::runtime_error("get failed:" + describe(r.message));
    return std::move(r.payload);
  }
  proto::Done run(std::string kernel, std::vector<proto::RunArg> args) {
    send(proto::Run{++request_, std::move(kernel), "test", std::move(args)});
    return next_as<proto::Done>();
  }
  proto::StatsReply stats() {
    send(proto::StatsRequest{++request_});
    return next_as<proto::StatsReply>();
  }
  std::uint64_t next_request() { return ++request_; }

  static proto::RunArg buffer(std::uint64_t id, proto::Mode mode) {
    proto::RunArg a;
    a.kind = proto::RunArg::Kind::buffer;
    a.buffer = id;
    a.mode = mode;
    return a;
  }
  static proto::RunArg real(double value) {
    proto::RunArg a;
    a.kind = proto::RunArg::Kind::real;
    a.real = value;
    return a;
  }

  static std::string describe(const proto::Message& m) {
    return std::visit(
        [](const auto& x) -> std::string {
          if constexpr (requires { x.status; x.message; })
            return std::string(" status=") + proto::to_string(x.status) + " message=" + x.message;
          else
            return {};
        },
        m);
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<Received> queue;
    std::size_t arriving = 0;  // payloads still being received
    bool closed = false;
  };

  // On the progress thread. A payload is queued with its header once it is all there.
  static void receive(const std::shared_ptr<State>& state, transport::Incoming& in) {
    auto r = std::make_shared<Received>();
    try {
      r->message = proto::decode(in.header());
    } catch (const std::exception&) {
      return;
    }
    auto push = [state, r](bool had_payload) {
      std::lock_guard lock(state->mutex);
      if (had_payload) --state->arriving;
      state->queue.push_back(std::move(*r));
      state->changed.notify_all();
    };
    if (in.payload_bytes() == 0) return push(false);
    r->payload.resize(in.payload_bytes());
    {
      std::lock_guard lock(state->mutex);
      ++state->arriving;
    }
    in.into(r->payload.data(), [push](const std::string&) { push(true); });
  }

  std::uint16_t port_;
  std::string name_;
  std::shared_ptr<State> state_;
  transport::PublicKey host_key_{};
  transport::Nonce binding_{};
  std::shared_ptr<transport::Worker> worker_;
  std::shared_ptr<transport::Connection> connection_;
  std::uint64_t request_ = 0;
};

inline void TestClient::put_all(std::uint64_t id, proto::DType dtype, std::uint64_t rows, std::uint64_t cols,
                                const void* data, std::uint64_t bytes, std::uint64_t chunk) {
  const auto* bytes_ptr = static_cast<const std::byte*>(data);
  for (std::uint64_t offset = 0; offset < bytes; offset += chunk) {
    const std::uint64_t n = std::min(chunk, bytes - offset);
    auto ack = put(id, dtype, rows, cols, bytes_ptr + offset, n, offset);
    if (ack.status != proto::Status::ok)
      throw std::runtime_error("put failed: " + std::string(proto::to_string(ack.status)) + " " + ack.message);
  }
}

}  // namespace ferry::test
