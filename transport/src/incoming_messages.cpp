#include "incoming_messages.hpp"

#include <cstring>

#include "ferry/error.hpp"

namespace ferry::transport {

namespace {

using ReceiveOp = Worker::Impl::Receiving;

// A receive ends: its owner hears how, then a close waiting for it may follow.
void receive_finished(ReceiveOp* raw, const std::string& error) {
  std::unique_ptr<ReceiveOp> op(raw);
  op->impl->receiving.erase(op.get());
  notify(op->done, error);
  if (auto connection = op->connection.lock()) connection->payload_landed();
}

void receive_done(void* request, ucs_status_t status, std::size_t, void* user_data) {
  ucp_request_free(request);
  receive_finished(static_cast<ReceiveOp*>(user_data), status == UCS_OK ? std::string()
                                                                         : failure(status, "receiving a payload"));
}

}  // namespace

void IncomingMessage::into(void* dest, Done done) {
  if (taken_) throw UsageError("Incoming::into() called twice for one message");
  taken_ = true;
  if (!rendezvous_) {
    if (length_ != 0) std::memcpy(dest, data_, length_);
    notify(done, {});
    return;
  }
  auto* op = new ReceiveOp{std::move(done), &impl_, worker_, {}};
  if (bulk_ != nullptr) {
    op->connection = std::static_pointer_cast<ConnectionImpl>(bulk_->shared_from_this());
    bulk_->payload_landing();
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = receive_done;
  param.user_data = op;
  if (ucp_mem_h memh = impl_.slabs->find(dest, length_); memh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
  }
  // Tracked before the call: on an endpoint that failed, UCX 1.13 calls
  // receive_done from inside it and still returns the request, and that
  // callback then owns (and frees) op.
  impl_.receiving.insert(op);
  auto request = ucp_am_recv_data_nbx(worker_, data_, dest, length_, &param);
  // UCX owns the descriptor from here whatever happened; the callback must
  // say so with UCS_INPROGRESS rather than have it dropped.
  status_ = UCS_INPROGRESS;
  if (request == nullptr) {
    receive_finished(op, {});
  } else if (UCS_PTR_IS_ERR(request)) {
    receive_finished(op, failure(UCS_PTR_STATUS(request), "ucp_am_recv_data_nbx"));
  }
}

void OpenedMessage::into(void* dest, Done done) {
  const std::size_t wire = sealed_.payload_bytes();
  // Filled by the receive, so not zeroed first; bytes past `wire` left by
  // an earlier message are never read.
  std::shared_ptr<std::byte[]> staging = connection_->staging().take(wire);
  std::weak_ptr<ConnectionImpl> weak = connection_;
  sealed_.into(staging.get(), [staging, wire, dest, number = number_, weak,
                                 done = std::move(done)](const std::string& error) mutable {
    if (!error.empty()) return notify(done, error);
    auto connection = weak.lock();
    if (!connection || connection->closed()) return notify(done, "the connection closed");
    if (wire < open_elsewhere_from)
      return opened_or_rejected(*connection, connection->open_payload(number, staging.get(), wire, dest), done);
    // The progress thread goes back to receiving the next message; the
    // answer comes back to it, as an inline open's would.
    const auto key = reinterpret_cast<std::uintptr_t>(connection.get()) / alignof(ConnectionImpl);
    connection->openers().run(key, [connection, number, staging, wire, dest, done = std::move(done)]() mutable {
      const bool opened = connection->open_payload(number, staging.get(), wire, dest);
      // The connection moves on to the progress thread: were this thread
      // to drop the last reference, the worker it keeps alive would end
      // here and join this very thread.
      auto& target = *connection;
      target.post([connection = std::move(connection), opened, done = std::move(done)] {
        opened_or_rejected(*connection, opened, done);
      });
    });
  });
}

void OpenedMessage::opened_or_rejected(ConnectionImpl& connection, bool opened, const Done& done) {
  if (opened) return notify(done, {});
  const std::string why = "a payload failed authentication (tampered or truncated)";
  connection.reject(why);
  notify(done, why);
}

void PulledMessage::into(void* dest, Done done) {
  if (taken_) throw UsageError("Incoming::into() called twice for one message");
  taken_ = true;
  connection_.pull_into(descriptor_, dest, std::move(done));
}

}  // namespace ferry::transport
