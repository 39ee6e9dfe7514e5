// A Connection over one UCP endpoint. Client connections come from
// Connection::connect, server ones from the Listener; both are this class.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "ferry/transport/connection.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

// connect()'s wait: the first outcome (flush done, or endpoint failed) wins.
// Shared with the flush request, which may complete after the connection is gone.
struct ConnectState {
  std::promise<ucs_status_t> outcome;
  bool reported = false;
  void report(ucs_status_t status) {
    if (reported) return;
    reported = true;
    outcome.set_value(status);
  }
};

class ConnectionImpl final : public Connection {
 public:
  ConnectionImpl(std::shared_ptr<Worker> worker, MessageHandler on_message, ErrorHandler on_error);
  ~ConnectionImpl() override;

  void send(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes,
            std::function<void(const std::string& error)> done) override;
  void set_handlers(MessageHandler on_message, ErrorHandler on_error) override;
  void close() override;
  bool closed() const noexcept override { return closed_.load(); }
  std::string peer() const override { return peer_; }

  // Progress thread only, from here on.

  // Takes the endpoint: messages arriving on it now come to this connection.
  void attach(ucp_ep_h ep, std::string peer);
  void deliver(Incoming& message);
  // The endpoint failed (peer gone, or connecting failed).
  void fail(ucs_status_t status);
  // Set by connect(); a failure before it is reported goes there, not to on_error.
  std::shared_ptr<ConnectState> connecting;
  ucp_ep_h endpoint() const noexcept { return ep_; }
  void close_now(bool force);

  struct SendOp;  // one send in flight, owned by UCX's request until it completes

 private:
  void start_send(SendOp* op);
  std::shared_ptr<ConnectionImpl> self() { return std::static_pointer_cast<ConnectionImpl>(shared_from_this()); }

  std::shared_ptr<Worker> worker_;  // first: the parent outlives the child's members
  Worker::Impl& impl_;
  std::atomic<bool> closed_{false};
  std::string peer_;
  ucp_ep_h ep_ = nullptr;
  // Shared so that a handler replacing the handlers does not destroy itself mid-call.
  std::shared_ptr<const MessageHandler> on_message_;
  std::shared_ptr<const ErrorHandler> on_error_;
};

// The worker's AM handler for ferry_am_id; `arg` is the Worker::Impl.
ucs_status_t am_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                        const ucp_am_recv_param_t* param);
// The endpoints' error handler; `arg` is the Worker::Impl.
void endpoint_failed(void* arg, ucp_ep_h ep, ucs_status_t status);

}  // namespace ferry::transport
