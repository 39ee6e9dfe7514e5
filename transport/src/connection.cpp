// A connection's life: its handlers, what it delivers, and how it ends
// (closed here, failed or closed by the peer, dropped for misbehaving).
#include <cstring>
#include <optional>

#include "connection_impl.hpp"
#include "ferry/log.hpp"
#include "incoming_messages.hpp"
#include "send_op.hpp"

namespace ferry::transport {

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
    if (ep_ != nullptr) drop_endpoints(Ending::flushed);
    return;
  }
  worker_->call([&] {
    close_now(Ending::flushed);
    fail_pulled(gone);
  });
}

StagingPool& ConnectionImpl::staging() noexcept { return impl_.staging; }
CryptoThreads& ConnectionImpl::openers() noexcept { return impl_.openers; }
void ConnectionImpl::post(std::function<void()> fn) { impl_.post(std::move(fn)); }

bool ConnectionImpl::open_payload(std::uint64_t number, std::byte* sealed, std::size_t wire, void* dest) const {
  if (!channel_->open_payload(number, {sealed, wire})) return false;
  if (wire > seal_overhead) std::memcpy(dest, sealed, wire - seal_overhead);
  return true;
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

void ConnectionImpl::close() { close_from(Ending::flushed); }

void ConnectionImpl::close_after_goodbye() { close_from(Ending::peer_leaving); }

void ConnectionImpl::abort() { close_from(Ending::peer_silent); }

void ConnectionImpl::close_from(Ending how) {
  closed_ = true;
  if (impl_.on_progress_thread()) {
    // No handler runs after close() returns; the endpoint closes once the
    // sends queued before this call are on their way.
    on_message_.reset();
    on_error_.reset();
    impl_.post([self = self(), how] { self->close_now(how); });
  } else {
    worker_->call([this, how] { close_now(how); });
  }
}

void ConnectionImpl::close_now(Ending how) {
  closed_ = true;
  if (ep_ == nullptr) return;
  if (failed_ && flushes(how)) how = Ending::peer_gone;
  // Before the close notice, as they were queued before it.
  if (flushes(how)) flush_batch();
  close_endpoints(impl_, take_endpoints(), how);
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
  drop_endpoints(Ending::peer_gone);
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
  if (ep_ == nullptr || failed_) return;
  log().debug("ucx: connection to {} failed: {}", peer_, ucs_status_string(status));
  failed_ = true;
  std::string reason = "connection to " + peer_ + " failed: " + ucs_status_string(status);
  // A client that said bye on its shared-memory lane and exited at once:
  // its last messages may still wait in the lane's FIFO when the control
  // endpoint reports it gone. One more progress, outside this callback,
  // delivers them first, so that its session ends as it said ("said bye",
  // not "went away"); a peer that really died left nothing there. Only on
  // the accepting end (ferryd's): a dialler ends at once, so that what it
  // would send next goes elsewhere (a runtime's tasks to other devices)
  // rather than onto a lane to a dead ferryd.
  if (lane_ == nullptr || !lane_accepted_) return end(reason);
  post([self = self(), reason = std::move(reason)] {
    while (self->impl_.progress() != 0) {
    }
    self->end(reason);
  });
}

}  // namespace ferry::transport
