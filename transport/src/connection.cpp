#include <chrono>
#include <cstring>
#include <optional>
#include <random>

#include "connection_impl.hpp"
#include "ferry/allocator/small_objects.hpp"
#include "little_endian.hpp"
#include "worker_address.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::transport {

namespace {

using Done = std::function<void(const std::string& error)>;

// User callbacks run inside UCX's callbacks, where an exception must not pass.
void notify(const Done& done, const std::string& error) {
  if (!done) return;
  try {
    done(error);
  } catch (const std::exception& e) {
    log().error("ucx: a completion callback threw: {}", e.what());
  }
}

std::string failure(ucs_status_t status, const char* call) {
  return std::string(call) + ": " + ucs_status_string(status);
}

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

// Valid for one AM callback. Eager data is copied out right there; a
// rendezvous payload is fetched straight into `dest` by ucp_am_recv_data_nbx.
class IncomingMessage final : public Incoming {
 public:
  // `bulk`: the connection, when the message came on its peer's bulk lane
  // (a close waits for its payload).
  IncomingMessage(Worker::Impl& impl, std::span<const std::byte> header, void* data, std::size_t length,
                  bool rendezvous, ConnectionImpl* bulk = nullptr)
      : impl_(impl), header_(header), data_(data), length_(length), rendezvous_(rendezvous), bulk_(bulk) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override { return length_; }

  void into(void* dest, Done done) override {
    if (taken_) throw UsageError("Incoming::into() called twice for one message");
    taken_ = true;
    if (!rendezvous_) {
      if (length_ != 0) std::memcpy(dest, data_, length_);
      notify(done, {});
      return;
    }
    auto* op = new ReceiveOp{std::move(done), &impl_, {}};
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
    auto request = ucp_am_recv_data_nbx(impl_.worker, data_, dest, length_, &param);
    // UCX owns the descriptor from here whatever happened; the callback must
    // say so with UCS_INPROGRESS rather than have it dropped.
    status_ = UCS_INPROGRESS;
    if (request == nullptr) {
      receive_finished(op, {});
    } else if (UCS_PTR_IS_ERR(request)) {
      receive_finished(op, failure(UCS_PTR_STATUS(request), "ucp_am_recv_data_nbx"));
    }
  }

  ucs_status_t status() const noexcept { return status_; }

 private:
  Worker::Impl& impl_;
  std::span<const std::byte> header_;
  void* data_;
  std::size_t length_;
  bool rendezvous_;
  ConnectionImpl* bulk_;
  bool taken_ = false;
  ucs_status_t status_ = UCS_OK;
};

}  // namespace

struct ConnectionImpl::SendOp {
  SendOp(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes, Done done,
         unsigned am = ferry_am_id)
      : header(std::move(header)), payload(payload), payload_bytes(payload_bytes), done(std::move(done)), am(am) {}
  // Made on the sender's thread, freed on the progress thread.
  static void* operator new(std::size_t bytes) { return small_object_allocate(bytes, alignof(SendOp)); }
  static void operator delete(void* ptr, std::size_t bytes) noexcept { small_object_deallocate(ptr, bytes); }

  std::vector<std::byte> header;  // UCX 1.13 reads the AM header until the send completes
  const void* payload;
  std::size_t payload_bytes;
  Done done;
  // An encrypted connection's payload, sealed: what goes on the wire, in a
  // buffer from the worker's staging pool. Not zero-filled first: the seal
  // writes every byte, and a 4 MiB memset per chunk was a fifth of the
  // sender's work.
  std::shared_ptr<std::byte[]> sealed;
  Worker::Impl* counted = nullptr;  // in Worker::Impl::sending_payloads until done
  bool soon = false;                // send_soon: may wait for company
  // Kept alive until the send starts: held here rather than by the function
  // queued for it, whose captures then fit std::function without a heap
  // allocation (one per message saved).
  std::shared_ptr<ConnectionImpl> sender;
  unsigned am;  // the pull messages go under AM ids of their own
};

namespace {

// An encrypted connection's message: the header opened already, the payload
// landing sealed in a staging buffer of its own and opened there; the
// destination sees plaintext only once it authenticated, and nothing at all
// otherwise.
class OpenedMessage final : public Incoming {
 public:
  OpenedMessage(Incoming& sealed, std::vector<std::byte> header, std::uint64_t number,
                std::shared_ptr<ConnectionImpl> connection)
      : sealed_(sealed), header_(std::move(header)), number_(number), connection_(std::move(connection)) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override {
    const auto wire = sealed_.payload_bytes();
    return wire == 0 ? 0 : wire - seal_overhead;
  }

  void into(void* dest, Done done) override {
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
      if (wire < open_elsewhere_from) return open_into(*connection, number, staging.get(), wire, dest, done);
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
          if (opened) return notify(done, {});
          const std::string why = "a payload failed authentication (tampered or truncated)";
          connection->reject(why);
          notify(done, why);
        });
      });
    });
  }

 private:
  // Payloads smaller than this are opened on the progress thread: a hand-off
  // costs two wake-ups, more than opening 256 KiB.
  static constexpr std::size_t open_elsewhere_from = std::size_t{256} << 10;

  static void open_into(ConnectionImpl& connection, std::uint64_t number, std::byte* staging, std::size_t wire,
                        void* dest, const Done& done) {
    if (!connection.open_payload(number, staging, wire, dest)) {
      const std::string why = "a payload failed authentication (tampered or truncated)";
      connection.reject(why);
      return notify(done, why);
    }
    notify(done, {});
  }

 private:
  Incoming& sealed_;
  std::vector<std::byte> header_;
  std::uint64_t number_;
  std::shared_ptr<ConnectionImpl> connection_;
};

}  // namespace

namespace {

// A message whose payload stays in the sender's memory until into() pulls it.
class PulledMessage final : public Incoming {
 public:
  PulledMessage(ConnectionImpl& connection, std::span<const std::byte> header, const pull::Descriptor& d)
      : connection_(connection), header_(header), descriptor_(d) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override { return descriptor_.bytes; }
  void into(void* dest, Done done) override {
    if (taken_) throw UsageError("Incoming::into() called twice for one message");
    taken_ = true;
    connection_.pull_into(descriptor_, dest, std::move(done));
  }
  bool taken() const noexcept { return taken_; }

 private:
  ConnectionImpl& connection_;
  std::span<const std::byte> header_;
  pull::Descriptor descriptor_;
  bool taken_ = false;
};

void flush_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<Done> done(static_cast<Done*>(user_data));
  ucp_request_free(request);
  notify(*done, status == UCS_OK ? std::string() : failure(status, "flushing"));
}

void send_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<ConnectionImpl::SendOp> op(static_cast<ConnectionImpl::SendOp*>(user_data));
  ucp_request_free(request);
  if (op->counted != nullptr) --op->counted->sending_payloads;
  notify(op->done, status == UCS_OK ? std::string() : failure(status, "sending"));
}

// A batch's frames: [u32 length, little-endian][the header], one after another.
constexpr std::size_t frame_prefix = 4;
// Gathered up to this much, then sent: small enough to go eagerly in one piece.
constexpr std::size_t max_batch_bytes = std::size_t{64} << 10;

}  // namespace

struct ConnectionImpl::BatchOp {
  std::vector<std::byte> frames;  // UCX reads them until the send completes
  std::vector<std::unique_ptr<SendOp>> ops;
};

namespace {

void batch_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<ConnectionImpl::BatchOp> batch(static_cast<ConnectionImpl::BatchOp*>(user_data));
  ucp_request_free(request);
  const std::string error = status == UCS_OK ? std::string() : failure(status, "sending");
  for (const auto& op : batch->ops) notify(op->done, error);
}

}  // namespace

ConnectionImpl::ConnectionImpl(std::shared_ptr<Worker> worker, MessageHandler on_message, ErrorHandler on_error)
    : worker_(std::move(worker)),
      impl_(worker_->impl()),
      on_message_(std::make_shared<const MessageHandler>(std::move(on_message))),
      on_error_(std::make_shared<const ErrorHandler>(std::move(on_error))) {}

ConnectionImpl::~ConnectionImpl() {
  // Payloads the peer has not released yet were kept through a graceful
  // close (the peer may still be copying them); with this object gone no
  // release can arrive for them.
  const std::string gone = "connection to " + peer_ + " is closed";
  if (impl_.on_progress_thread()) {
    fail_pulled(gone);
    // Possibly inside a UCX callback for this very endpoint: close it later.
    if (ep_ != nullptr) impl_.post([impl = &impl_, eps = take_endpoints()] { close_endpoints(*impl, eps, false); });
    return;
  }
  worker_->call([&] {
    close_now(false);
    fail_pulled(gone);
  });
}

std::shared_ptr<Connection> Connection::to_worker(const std::shared_ptr<Worker>& worker,
                                                  std::span<const std::uint8_t> worker_address, std::string peer,
                                                  std::unique_ptr<SecureChannel> channel, MessageHandler on_message,
                                                  ErrorHandler on_error, protocol::Lane lane, bool accepted,
                                                  pid_t peer_pid) {
  // The one door to ucp_ep_create for a peer's bytes: UCX trusts them (an
  // unknown version is an assertion, a long length a read past the end).
  if (const std::string why = worker_address::check(worker_address); !why.empty())
    throw ProtocolError("the UCX worker address of " + peer + " is unusable: " + why);
  auto connection = std::make_shared<ConnectionImpl>(worker, std::move(on_message), std::move(on_error));
  connection->secure(std::move(channel));
  auto create = [&] {
    auto& impl = worker->impl();
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = endpoint_failed;
    params.err_handler.arg = &impl;
    ucp_ep_h ep = nullptr;
    check(ucp_ep_create(impl.worker, &params, &ep), "ucp_ep_create to the worker of " + peer);
    connection->attach(ep, peer);
    if (lane == protocol::Lane::bulk) {
      // Created after the control endpoint on both ends, the dialer's
      // payloads' first, so UCX pairs them as it pairs the control
      // endpoints. Peer error handling like the control endpoint's: the
      // transports that rule it out are the shared-memory lane's business.
      ucp_ep_h lanes[2] = {nullptr, nullptr};
      for (ucp_ep_h& bulk : lanes) {
        const auto status = ucp_ep_create(impl.worker, &params, &bulk);
        if (status != UCS_OK) {
          for (ucp_ep_h made : lanes)
            if (made != nullptr) impl.close_endpoint(made, true, false);
          connection->close_now(true);
          throw_ucx(status, "ucp_ep_create (bulk lane) to the worker of " + peer);
        }
      }
      connection->attach_bulk(lanes[accepted ? 1 : 0], lanes[accepted ? 0 : 1]);
      return;
    }
    if (lane != protocol::Lane::shared_memory) return;
    // Created second on both ends, so UCX pairs the lanes as it pairs the
    // control endpoints. No error handling: it is what lets UCX choose
    // shared memory and CMA; the control endpoint notices the peer's death.
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h lane_ep = nullptr;
    const auto status = ucp_ep_create(impl.worker, &params, &lane_ep);
    if (status != UCS_OK) {
      connection->close_now(true);
      throw_ucx(status, "ucp_ep_create (shared-memory lane) to the worker of " + peer);
    }
    connection->attach_lane(lane_ep);
    connection->offer_pulls(peer_pid, accepted);
  };
  if (worker->on_progress_thread()) {
    create();
  } else {
    worker->call(create);
  }
  log().debug("ucx: endpoint to the worker of {}{}{}", peer, connection->encrypted() ? " (sealed)" : "",
              lane == protocol::Lane::shared_memory ? " with a shared-memory lane"
              : lane == protocol::Lane::bulk        ? " with bulk lanes"
                                                    : "");
  return connection;
}

void ConnectionImpl::attach(ucp_ep_h ep, std::string peer) {
  gather_soon_ = impl_.sends_are_system_calls;
  ep_ = ep;
  peer_ = std::move(peer);
  impl_.connections[ep] = this;
}

void ConnectionImpl::attach_lane(ucp_ep_h lane) {
  // Gathered here too, though a send on shared memory is a store: a peer
  // asleep on its fd is signalled per message (a system call each side and
  // a wake-up), once per batch gathered. A 20,000-task chain on the lane,
  // 24 alternating runs each: median 3.49 µs/task sending at once (2.79-5.49),
  // 3.19 gathered (2.82-3.74).
  lane_ = lane;
  impl_.connections[lane] = this;
  ++impl_.shared_memory_lanes;
}

void ConnectionImpl::attach_bulk(ucp_ep_h out, ucp_ep_h in) {
  bulk_out_ = out;
  bulk_in_ = in;
  impl_.connections[out] = this;
  impl_.connections[in] = this;
  if (channel_) channel_->number_payloads_apart();
}

ConnectionImpl::Endpoints ConnectionImpl::take_endpoints() {
  Endpoints eps{std::exchange(ep_, nullptr), std::exchange(lane_, nullptr), std::exchange(bulk_out_, nullptr),
                std::exchange(bulk_in_, nullptr), bulk_sent_};
  for (ucp_ep_h ep : {eps.ep, eps.lane, eps.bulk_out, eps.bulk_in})
    if (ep != nullptr) impl_.connections.erase(ep);
  if (eps.lane != nullptr) --impl_.shared_memory_lanes;
  return eps;
}

// The bulk lanes first and without a notice (the control endpoint carries
// the connection's); the lane's close notice follows the messages on it, and
// the control endpoint then goes without one, which could overtake them. The
// lane is never forced: UCX refuses to force-close an endpoint without error
// handling, which left it open for good; it closes with a flush instead (a
// worker's shutdown bounds the wait), without the notice when the peer is gone.
void ConnectionImpl::close_endpoints(Worker::Impl& impl, const Endpoints& eps, bool force) {
  for (ucp_ep_h bulk : {eps.bulk_out, eps.bulk_in})
    if (bulk != nullptr) impl.close_endpoint(bulk, force, false);
  if (eps.lane != nullptr) impl.close_endpoint(eps.lane, false, !force);
  if (eps.ep != nullptr) impl.close_endpoint(eps.ep, force, eps.lane == nullptr, eps.bulk_sent);
}

void ConnectionImpl::drop_endpoints(bool force) {
  // Not from inside an endpoint's own error callback, hence posted.
  impl_.post([impl = &impl_, eps = take_endpoints(), force] { close_endpoints(*impl, eps, force); });
}

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

StagingPool& ConnectionImpl::staging() noexcept { return impl_.staging; }
CryptoThreads& ConnectionImpl::openers() noexcept { return impl_.openers; }
void ConnectionImpl::post(std::function<void()> fn) { impl_.post(std::move(fn)); }

bool ConnectionImpl::open_payload(std::uint64_t number, std::byte* sealed, std::size_t wire, void* dest) const {
  if (!channel_->open_payload(number, {sealed, wire})) return false;
  if (wire > seal_overhead) std::memcpy(dest, sealed, wire - seal_overhead);
  return true;
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
  if (op->payload_bytes != 0) {
    op->counted = &impl_;
    ++impl_.sending_payloads;
  }
  // send_done's from the call on: on an endpoint that failed, UCX 1.13 may
  // call it from inside the call and still return the request (as it does
  // receive_done), so op is not touched after a request came back.
  auto* raw = op.release();
  auto request = ucp_am_send_nbx(ep, raw->am, raw->header.data(), raw->header.size(), raw->payload,
                                 raw->payload_bytes, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    op.reset(raw);  // ended at once: no callback comes
    if (op->counted != nullptr) --impl_.sending_payloads;
  }
  if (UCS_PTR_IS_ERR(request))
    return notify(op->done, failure(UCS_PTR_STATUS(request), ("ucp_am_send_nbx to " + peer_).c_str()));
  if (ep == bulk_out_) ++bulk_sent_;
  if (request == nullptr) return notify(op->done, {});
  // Started on the sending thread while the progress thread sleeps: wake
  // it to carry the rest (a rendezvous, a full socket).
  if (!impl_.progressing_here()) impl_.wake();
}

// ---- pulled payloads (pull.hpp) ----

void ConnectionImpl::offer_pulls(pid_t peer_pid, bool accepted) {
  if (channel_) return;  // a sealed payload is opened by its receiver: it must travel
  // FERRY_PULL_PAYLOADS=0 here keeps this end from pulling as well as from being pulled.
  peer_pid_ = pull::enabled() ? peer_pid : 0;
  accepted_ = accepted;
  if (!accepted) send_probe();
}

void ConnectionImpl::send_probe() {
  probe_sent_ = true;
  const bool offer = pull::enabled();
  if (offer) {
    std::random_device random;
    for (auto& b : probe_) b = static_cast<std::byte>(random());
  }
  send_control(pull::probe(offer ? &probe_ : nullptr));
}

void ConnectionImpl::send_control(std::vector<std::byte> message) {
  send_now(std::make_unique<SendOp>(std::move(message), nullptr, 0, Done{}, ferry_pull_control_am_id));
}

void ConnectionImpl::on_pull_control(const pull::ControlMessage& message) {
  switch (message.kind) {
    case pull::Control::probe: {
      if (accepted_ && !probe_sent_ && lane_ != nullptr) send_probe();
      if (message.address == 0 || peer_pid_ == 0 || pulls_from_peer_) return;
      pull::ProbeBytes read{};
      const std::string error = pull::read_from(peer_pid_, message.address, read.data(), read.size());
      if (!error.empty() || read != message.bytes) {
        log().debug("ucx: {}'s payloads travel (its probe did not read back: {})", peer_,
                    error.empty() ? "other bytes" : error);
        return;
      }
      pulls_from_peer_ = true;
      log().debug("ucx: this end pulls {}'s payloads out of its memory", peer_);
      return send_control(pull::probed());
    }
    case pull::Control::probed:
      if (!probe_sent_ || !pull::enabled()) return reject("the peer answered a probe this end did not send");
      peer_pulls_.store(true, std::memory_order_relaxed);
      log().debug("ucx: {} pulls this end's payloads out of its memory", peer_);
      return;
    case pull::Control::released:
      return release(message.token, message.ok ? std::string() : "the peer could not read the payload");
  }
}

void ConnectionImpl::send_pulled(std::unique_ptr<SendOp> op) {
  const std::uint64_t token = next_pull_++;
  std::vector<std::byte> header;
  header.reserve(pull::descriptor_bytes + op->header.size());
  pull::append(header, {token, reinterpret_cast<std::uintptr_t>(op->payload), op->payload_bytes});
  header.insert(header.end(), op->header.begin(), op->header.end());
  // The descriptor's own send failing means the peer never saw it.
  std::weak_ptr<ConnectionImpl> weak = self();
  auto carrier = std::make_unique<SendOp>(
      std::move(header), nullptr, 0,
      [weak, token](const std::string& error) {
        if (error.empty()) return;
        if (auto connection = weak.lock()) connection->release(token, error);
      },
      ferry_pull_am_id);
  pulled_.emplace(token, std::move(op));
  send_now(std::move(carrier));
}

void ConnectionImpl::release(std::uint64_t token, const std::string& error) {
  const auto it = pulled_.find(token);
  if (it == pulled_.end()) return;  // failed already (its descriptor's send, then the peer's answer)
  auto op = std::move(it->second);
  pulled_.erase(it);
  notify(op->done, error);
}

void ConnectionImpl::fail_pulled(const std::string& reason) {
  auto pending = std::exchange(pulled_, {});
  for (auto& [token, op] : pending) notify(op->done, reason);
}

void ConnectionImpl::pull_into(const pull::Descriptor& d, void* dest, Done done) {
  // Payloads smaller than this are copied on the progress thread: a
  // hand-off costs two wake-ups, more than copying 256 KiB.
  constexpr std::size_t pull_elsewhere_from = std::size_t{256} << 10;
  const auto finish = [](ConnectionImpl& connection, std::uint64_t token, const std::string& error, const Done& done) {
    connection.send_control(pull::released(token, error.empty()));
    if (error.empty()) connection.impl_.pulled_payloads.fetch_add(1, std::memory_order_relaxed);
    notify(done, error.empty() ? error : "pulling a payload: " + error);
  };
  if (d.bytes < pull_elsewhere_from)
    return finish(*this, d.token, pull::read_from(peer_pid_, d.address, dest, d.bytes), done);
  // Keyed by the payload: a transfer's chunks in flight copy side by side.
  openers().run(d.token, [connection = self(), pid = peer_pid_, d, dest, finish, done = std::move(done)]() mutable {
    std::string error = pull::read_from(pid, d.address, dest, d.bytes);
    // The connection moves on to the progress thread: were this thread to
    // drop the last reference, the worker it keeps alive would end here
    // and join this very thread.
    auto& target = *connection;
    target.post([connection = std::move(connection), token = d.token, error = std::move(error), finish,
                 done = std::move(done)] { finish(*connection, token, error, done); });
  });
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
// the peer's, the control endpoint, and the shared-memory lane last, since
// it has no error handling and its flush would wait forever for a dead
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

void ConnectionImpl::set_handlers(MessageHandler on_message, ErrorHandler on_error) {
  auto message = std::make_shared<const MessageHandler>(std::move(on_message));
  auto error = std::make_shared<const ErrorHandler>(std::move(on_error));
  auto install = [&] {
    if (closed_) return;  // a closed connection calls no handler
    on_message_ = std::move(message);
    on_error_ = std::move(error);
  };
  if (impl_.on_progress_thread()) {
    install();
  } else {
    worker_->call(install);
  }
}

void ConnectionImpl::close() {
  closed_ = true;
  if (impl_.on_progress_thread()) {
    // No handler runs after close() returns; the endpoint closes once the
    // sends queued before this call are on their way.
    on_message_.reset();
    on_error_.reset();
    impl_.post([self = self()] { self->close_now(false); });
  } else {
    worker_->call([this] { close_now(false); });
  }
}

void ConnectionImpl::close_now(bool force) {
  closed_ = true;
  if (ep_ == nullptr) return;
  if (!force) flush_batch();  // before the close notice, as they were queued before it
  close_endpoints(impl_, take_endpoints(), force);
  // Handlers often capture their connection; dropping them breaks the cycle.
  on_message_.reset();
  on_error_.reset();
}

void ConnectionImpl::deliver(Incoming& message) {
  auto handler = on_message_;
  if (!handler || !*handler) return;
  std::optional<OpenedMessage> opened;
  if (channel_) {
    std::vector<std::byte> header;
    std::uint64_t number = 0;
    if (!channel_->open_header(message.header(), message.payload_bytes(), header, number))
      return reject("a message failed authentication (tampered, replayed, reordered or truncated)");
    opened.emplace(message, std::move(header), number, self());
  }
  try {
    (*handler)(*this, opened ? static_cast<Incoming&>(*opened) : message);
  } catch (const std::exception& e) {
    log().error("ucx: message handler for {} threw: {}", peer_, e.what());
  }
}

void ConnectionImpl::reject(const std::string& why) {
  if (ep_ == nullptr) return;
  log().warn("ucx: dropping the connection with {}: {}", peer_, why);
  end("connection with " + peer_ + " dropped: " + why);
}

void ConnectionImpl::end(const std::string& reason) {
  if (ep_ == nullptr) return;
  closed_ = true;
  // A failed endpoint can only be force-closed, and not from inside its own
  // error callback. With a lane, the peer is gone (the control endpoint
  // failed) or is being dropped: its lane's outstanding requests end now.
  drop_endpoints(true);
  // Nobody reads them any more: the peer is gone, or dropped for misbehaving.
  fail_pulled(reason);
  auto handler = std::move(on_error_);
  on_message_.reset();
  if (!handler || !*handler) return;
  try {
    (*handler)(*this, reason);
  } catch (const std::exception& e) {
    log().error("ucx: error handler for {} threw: {}", peer_, e.what());
  }
}

void ConnectionImpl::peer_closed(std::uint64_t bulk_sent) {
  peer_bulk_sent_ = bulk_sent;
  settle_close();
}

void ConnectionImpl::payload_landed() {
  --payloads_landing_;
  // Posted: this may run inside a message handler (a receive that ended at
  // once), which must not see the error handler run under it.
  if (peer_bulk_sent_) post([self = self()] { self->settle_close(); });
}

void ConnectionImpl::settle_close() {
  if (!peer_bulk_sent_ || bulk_received_ < *peer_bulk_sent_ || payloads_landing_ != 0) return;
  end("connection to " + peer_ + " closed by the peer");
}

void ConnectionImpl::fail(ucs_status_t status) {
  if (ep_ == nullptr) return;
  log().debug("ucx: connection to {} failed: {}", peer_, ucs_status_string(status));
  end("connection to " + peer_ + " failed: " + ucs_status_string(status));
}

ucs_status_t am_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                        const ucp_am_recv_param_t* param) {
  auto& impl = *static_cast<Worker::Impl*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    log().warn("ucx: dropped a message without a reply endpoint (not from a Ferry peer?)");
    return UCS_OK;
  }
  auto found = impl.connections.find(param->reply_ep);
  if (found == impl.connections.end()) return UCS_OK;  // closing: dropped
  // Null while its destructor waits for this thread to unregister it.
  auto connection = found->second->weak_from_this().lock();
  if (!connection) return UCS_OK;
  // With no header, `header` is undefined (UCX's words), not null.
  std::span<const std::byte> header_bytes;
  if (header_length != 0) header_bytes = {static_cast<const std::byte*>(header), header_length};
  auto& self = static_cast<ConnectionImpl&>(*connection);
  const bool bulk = self.came_on_bulk_lane(param->reply_ep);
  IncomingMessage message(impl, header_bytes, data, length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0,
                          bulk ? &self : nullptr);
  self.deliver(message);
  if (bulk) self.settle_close();
  return message.status();
}

ucs_status_t batch_receive(void* arg, const void*, std::size_t, void* data, std::size_t length,
                           const ucp_am_recv_param_t* param) {
  auto& impl = *static_cast<Worker::Impl*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return UCS_OK;
  auto found = impl.connections.find(param->reply_ep);
  if (found == impl.connections.end()) return UCS_OK;  // closing: dropped
  auto connection = found->second->weak_from_this().lock();
  if (!connection) return UCS_OK;
  auto& self = static_cast<ConnectionImpl&>(*connection);
  // Framing only: each frame is then a message like any other (opened and
  // authenticated by deliver on a sealed connection).
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    self.reject("a batch of messages came by rendezvous, not eagerly");
    return UCS_OK;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  for (std::size_t at = 0; at < length && !self.closed();) {
    // An empty frame is an empty header, as a message alone may have one
    // (the protocol, not the framing, refuses it).
    if (length - at < frame_prefix || get_le<std::uint32_t>(bytes + at) > length - at - frame_prefix) {
      self.reject("a malformed batch of messages");
      break;
    }
    const std::uint32_t n = get_le<std::uint32_t>(bytes + at);
    at += frame_prefix;
    IncomingMessage message(impl, {bytes + at, n}, nullptr, 0, false);
    self.deliver(message);
    at += n;
  }
  return UCS_OK;
}

ucs_status_t close_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t,
                          const ucp_am_recv_param_t* param) {
  auto& impl = *static_cast<Worker::Impl*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return UCS_OK;
  auto found = impl.connections.find(param->reply_ep);
  if (found == impl.connections.end()) return UCS_OK;
  auto connection = found->second->weak_from_this().lock();
  if (!connection) return UCS_OK;
  auto& self = static_cast<ConnectionImpl&>(*connection);
  // No header: nothing went on a bulk lane (or the peer predates the count).
  std::uint64_t bulk_sent = 0;
  if (header_length == sizeof bulk_sent) {
    bulk_sent = get_le<std::uint64_t>(static_cast<const std::byte*>(header));
  } else if (header_length != 0) {
    self.reject("a malformed close notice");
    return UCS_OK;
  }
  log().debug("ucx: {} closed the connection", self.peer());
  self.peer_closed(bulk_sent);
  return UCS_OK;
}

namespace {

// The connection an AM from `param`'s reply endpoint belongs to, or null.
std::shared_ptr<ConnectionImpl> connection_of(Worker::Impl& impl, const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  auto found = impl.connections.find(param->reply_ep);
  if (found == impl.connections.end()) return nullptr;
  return std::static_pointer_cast<ConnectionImpl>(found->second->weak_from_this().lock());
}

std::span<const std::byte> header_bytes(const void* header, std::size_t header_length) {
  if (header_length == 0) return {};
  return {static_cast<const std::byte*>(header), header_length};
}

}  // namespace

ucs_status_t pull_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t length,
                          const ucp_am_recv_param_t* param) {
  auto connection = connection_of(*static_cast<Worker::Impl*>(arg), param);
  if (!connection) return UCS_OK;
  const auto bytes = header_bytes(header, header_length);
  const auto descriptor = pull::read_descriptor(bytes);
  // Only from a peer whose probe this end read: one it can pull from.
  if (!descriptor || length != 0 || !connection->pulls_from_peer()) {
    connection->reject("a pulled payload this end did not agree to");
    return UCS_OK;
  }
  PulledMessage message(*connection, bytes.subspan(pull::descriptor_bytes), *descriptor);
  connection->deliver(message);
  // Dropped by the handler: the sender may let it go.
  if (!message.taken()) connection->send_control(pull::released(descriptor->token, true));
  return UCS_OK;
}

ucs_status_t pull_control_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t length,
                                  const ucp_am_recv_param_t* param) {
  auto connection = connection_of(*static_cast<Worker::Impl*>(arg), param);
  if (!connection) return UCS_OK;
  const auto message = pull::read_control(header_bytes(header, header_length));
  if (!message || length != 0) {
    connection->reject("a malformed pull control message");
    return UCS_OK;
  }
  connection->on_pull_control(*message);
  return UCS_OK;
}

void endpoint_failed(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto& impl = *static_cast<Worker::Impl*>(arg);
  auto found = impl.connections.find(ep);
  if (found == impl.connections.end()) return;
  auto connection = found->second->weak_from_this().lock();
  if (!connection) return;
  static_cast<ConnectionImpl&>(*connection).fail(status);
}

}  // namespace ferry::transport
