// A connection's sends: sealed on the sender's thread, started or gathered
// into batches on the progress thread, flushed endpoint by endpoint.
#include <chrono>
#include <mutex>

#include "connection_impl.hpp"
#include "little_endian.hpp"
#include "send_op.hpp"

namespace ferry::transport {

namespace {

void flush_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<Done> done(static_cast<Done*>(user_data));
  ucp_request_free(request);
  notify(*done, status == UCS_OK ? std::string() : failure(status, "flushing"));
}

void send_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<ConnectionImpl::SendOp> op(static_cast<ConnectionImpl::SendOp*>(user_data));
  ucp_request_free(request);
  if (op->counted != nullptr) Worker::Impl::payload_sent(*op->counted);
  notify(op->done, status == UCS_OK ? std::string() : failure(status, "sending"));
}

void batch_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<ConnectionImpl::BatchOp> batch(static_cast<ConnectionImpl::BatchOp*>(user_data));
  ucp_request_free(request);
  const std::string error = status == UCS_OK ? std::string() : failure(status, "sending");
  for (const auto& op : batch->ops) notify(op->done, error);
}

}  // namespace

void ConnectionImpl::send(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes, Done done) {
  // Through the queue even on the progress thread, so sends keep their order
  // with each other and with close(); from another thread, started right
  // here when the progress thread sleeps with nothing queued (run_or_post):
  // no wake-up on the way out.
  queue(new SendOp(std::move(header), payload, payload_bytes, std::move(done)));
}

void ConnectionImpl::send_soon(std::vector<std::byte> header, Done done) {
  auto* op = new SendOp(std::move(header), nullptr, 0, std::move(done));
  op->soon = gather_soon_.load(std::memory_order_relaxed);
  queue(op);
}

void ConnectionImpl::push() {
  if (!corked_.load(std::memory_order_acquire)) return;
  impl_.run_or_post([self = self()] { self->flush_batch(); });
}

void ConnectionImpl::queue(SendOp* op) {
  op->sender = self();
  if (!channel_) return impl_.run_or_post([op] { std::exchange(op->sender, nullptr)->start_send(op); });
  if (op->header.size() + seal_overhead > impl_.max_am_header) {
    // Refused before sealing, so the peer's numbering never sees a gap.
    std::unique_ptr<SendOp> refused(op);
    return notify(refused->done, "header of " + std::to_string(refused->header.size() + seal_overhead) +
                                     " sealed bytes exceeds UCX's limit of " + std::to_string(impl_.max_am_header));
  }
  // Sealed here, on the sender's thread, while the progress thread puts the
  // previous message on the wire. The lock spans sealing and queueing, so
  // messages reach the wire in the order of their numbers.
  std::span<const std::byte> plain(static_cast<const std::byte*>(op->payload), op->payload_bytes);
  const std::size_t sealed_bytes = op->payload_bytes == 0 ? 0 : op->payload_bytes + seal_overhead;
  if (sealed_bytes != 0) op->sealed = staging().take(sealed_bytes);
  std::lock_guard lock(seal_mutex_);
  op->header = channel_->seal(op->header, plain, op->sealed.get());
  op->payload = op->sealed.get();
  op->payload_bytes = sealed_bytes;
  impl_.run_or_post([op] { std::exchange(op->sender, nullptr)->start_send(op); });
}

void ConnectionImpl::start_send(SendOp* raw) {
  std::unique_ptr<SendOp> op(raw);
  if ((impl_.batching || op->soon) && ep_ != nullptr && op->payload_bytes == 0 && op->am == ferry_am_id &&
      op->header.size() <= impl_.max_am_header) {
    if (batched_.empty()) {
      impl_.to_flush.push_back(self());
      if (op->soon) impl_.cork(std::chrono::steady_clock::now() + Worker::cork_limit);
    }
    if (op->soon) corked_.store(true, std::memory_order_release);
    batched_urgent_ = batched_urgent_ || !op->soon;
    batched_bytes_ += frame_prefix + op->header.size();
    batched_.push_back(std::move(op));
    if (batched_bytes_ >= max_batch_bytes) flush_batch();
    return;
  }
  flush_batch();  // what was gathered before it goes first
  send_now(std::move(op));
}

void ConnectionImpl::flush_batch() {
  if (batched_.empty()) return;
  auto ops = std::exchange(batched_, {});
  const std::size_t bytes = std::exchange(batched_bytes_, 0);
  batched_urgent_ = false;
  corked_.store(false, std::memory_order_release);
  if (ops.size() == 1) return send_now(std::move(ops.front()));
  if (ep_ == nullptr) {
    for (const auto& op : ops) notify(op->done, "connection to " + peer_ + " is closed");
    return;
  }
  auto batch = std::make_unique<BatchOp>();
  batch->frames.reserve(bytes);
  for (const auto& op : ops) {
    put_le(batch->frames, static_cast<std::uint32_t>(op->header.size()));
    batch->frames.insert(batch->frames.end(), op->header.begin(), op->header.end());
  }
  impl_.batched_messages.fetch_add(ops.size(), std::memory_order_relaxed);
  batch->ops = std::move(ops);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // Eager: the receiver splits it inside its AM callback, with no receive to start.
  param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = batch_done;
  param.user_data = batch.get();
  // batch_done's from the call on (see send_now); back here only if UCX ended it at once.
  auto* raw = batch.release();
  auto request =
      ucp_am_send_nbx(lane_ != nullptr ? lane_ : ep_, ferry_batch_am_id, nullptr, 0, raw->frames.data(),
                      raw->frames.size(), &param);
  if (request == nullptr) {
    batch.reset(raw);
    for (const auto& op : batch->ops) notify(op->done, {});
  } else if (UCS_PTR_IS_ERR(request)) {
    batch.reset(raw);
    const std::string error = failure(UCS_PTR_STATUS(request), ("ucp_am_send_nbx to " + peer_).c_str());
    for (const auto& op : batch->ops) notify(op->done, error);
  }
}

void ConnectionImpl::send_now(std::unique_ptr<SendOp> op) {
  if (ep_ == nullptr) {
    notify(op->done, "connection to " + peer_ + " is closed");
    return;
  }
  if (op->header.size() > impl_.max_am_header) {
    notify(op->done, "header of " + std::to_string(op->header.size()) + " bytes exceeds UCX's limit of " +
                         std::to_string(impl_.max_am_header));
    return;
  }
  if (op->payload_bytes >= pull::pull_from && lane_ != nullptr && op->am == ferry_am_id &&
      peer_pulls_.load(std::memory_order_relaxed) && op->header.size() + pull::descriptor_bytes <= impl_.max_am_header)
    return send_pulled(std::move(op));
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // REPLY makes the receiver see its endpoint to us, which is how it finds
  // the Connection. Eager or rendezvous is left to UCX's threshold.
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = send_done;
  param.user_data = op.get();
  if (ucp_mem_h memh = impl_.slabs->find(op->payload, op->payload_bytes); memh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
  }
  // A payload on its bulk lane, where the peer's replies and requests never
  // queue behind it (and it behind them).
  ucp_ep_h ep = op->payload_bytes != 0 && bulk_out_ != nullptr ? bulk_out_ : lane_ != nullptr ? lane_ : ep_;
  if (op->payload_bytes != 0) op->counted = impl_.sending_payload(ep);
  // send_done's from the call on: on an endpoint that failed, UCX 1.13 may
  // call it from inside the call and still return the request (as it does
  // receive_done), so op is not touched after a request came back.
  auto* raw = op.release();
  auto request = ucp_am_send_nbx(ep, raw->am, raw->header.data(), raw->header.size(), raw->payload,
                                 raw->payload_bytes, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    op.reset(raw);  // ended at once: no callback comes
    if (op->counted != nullptr) Worker::Impl::payload_sent(*op->counted);
  }
  if (UCS_PTR_IS_ERR(request))
    return notify(op->done, failure(UCS_PTR_STATUS(request), ("ucp_am_send_nbx to " + peer_).c_str()));
  if (ep == bulk_out_) ++bulk_sent_;
  if (request == nullptr) return notify(op->done, {});
  // Started on the sending thread while the progress thread sleeps: wake
  // it to carry the rest (a rendezvous, a full socket).
  if (!impl_.progressing_here()) impl_.wake();
}

bool ConnectionImpl::wait_here(const std::function<bool()>& ready) {
  push();  // what send_soon holds back may be what the answer waits on
  return worker_->wait_here(ready);
}

void ConnectionImpl::flush(Done done) {
  // Through the queue, after the sends queued before it.
  auto* op = new Done(std::move(done));
  impl_.post([self = self(), op] {
    std::unique_ptr<Done> owned(op);
    self->flush_batch();  // gathered sends are among those queued before it
    self->flush_from(0, std::move(*owned));
  });
}

// Each endpoint in turn, re-read at each step (a close meanwhile clears
// them): this end's payload lane first, as the payloads went there; then
// the peer's, the control endpoint, and the shared-memory lane last: without
// error handling (an older peer's) its flush would wait forever for a dead
// peer, which the control endpoint's fails on first.
void ConnectionImpl::flush_from(int step, Done done) {
  const auto at = [this](int i) { return i == 0 ? bulk_out_ : i == 1 ? bulk_in_ : i == 2 ? ep_ : lane_; };
  if (ep_ == nullptr) return notify(done, "connection to " + peer_ + " is closed");
  while (step < 4 && at(step) == nullptr) ++step;
  if (step == 4) return notify(done, {});
  flush_endpoint(at(step), [self = self(), step, rest = std::move(done)](const std::string& error) mutable {
    if (!error.empty()) return notify(rest, error);
    self->flush_from(step + 1, std::move(rest));
  });
}

void ConnectionImpl::flush_endpoint(ucp_ep_h ep, std::function<void(const std::string& error)> done) {
  auto owned = std::make_unique<Done>(std::move(done));
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = flush_done;
  param.user_data = owned.get();
  auto request = ucp_ep_flush_nbx(ep, &param);
  if (request == nullptr) {
    notify(*owned, {});
  } else if (UCS_PTR_IS_ERR(request)) {
    notify(*owned, failure(UCS_PTR_STATUS(request), ("ucp_ep_flush_nbx to " + peer_).c_str()));
  } else {
    owned.release();  // flush_done owns it now
  }
}

}  // namespace ferry::transport
