// A Connection over one UCP endpoint, created from the peer's worker address
// (Connection::to_worker) by both the dialling and the accepting side.
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ferry/transport/connection.hpp"
#include "pull.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

class ConnectionImpl final : public Connection {
 public:
  ConnectionImpl(std::shared_ptr<Worker> worker, MessageHandler on_message, ErrorHandler on_error);
  ~ConnectionImpl() override;

  void send(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes,
            std::function<void(const std::string& error)> done) override;
  void send_soon(std::vector<std::byte> header, std::function<void(const std::string& error)> done) override;
  void push() override;
  bool wait_here(const std::function<bool()>& ready) override;
  void set_handlers(MessageHandler on_message, ErrorHandler on_error) override;
  void flush(std::function<void(const std::string& error)> done) override;
  void close() override;
  void close_after_goodbye() override;
  void abort() override;
  bool closed() const noexcept override { return closed_.load(); }
  std::string peer() const override { return peer_; }
  Worker::Addresses local_addresses() const override { return local_addresses_; }
  bool encrypted() const noexcept override { return channel_ != nullptr; }
  // Before any message: seals and opens every message from now on.
  void secure(std::unique_ptr<SecureChannel> channel) { channel_ = std::move(channel); }
  // Where sealed payloads are staged, both ways (any thread).
  StagingPool& staging() noexcept;
  CryptoThreads& openers() noexcept;
  void post(std::function<void()> fn);  // to the progress thread
  // Opens message `number`'s sealed payload in place and, once it
  // authenticated, copies the plaintext to dest; false (dest untouched) if
  // it did not. Any thread.
  bool open_payload(std::uint64_t number, std::byte* sealed, std::size_t wire, void* dest) const;

  // Progress thread only, from here on.

  // Takes the endpoint: messages arriving on it now come to this connection.
  // `local`: the addresses of the UCX worker it was made on.
  void attach(ucp_ep_h ep, std::string peer, Worker::Addresses local);
  // Takes the shared-memory lane's endpoint: every message goes on it from
  // now on. `accepted`: this end answered the dial (ferryd's end).
  // `handled`: made with peer error handling (the peer sent its network address).
  void attach_lane(ucp_ep_h lane, bool accepted, bool handled);
  // Takes the bulk lanes' endpoints: this end's messages with a payload go
  // out on `out` from now on, and a sealed connection numbers them apart.
  void attach_bulk(ucp_ep_h out, ucp_ep_h in);
  // After attach_lane: the peer's process, which the bootstrap proved (0:
  // none), whose payloads this end may then pull once its probe reads back
  // right. The end that did not accept the dial probes first; the other
  // answers with its own probe (pull.hpp).
  void offer_pulls(pid_t peer_pid, bool accepted);
  // Progress thread: a pull control message from the peer.
  void on_pull_control(const pull::ControlMessage& message);
  // Whether a pulled message from the peer is expected (its probe read back right).
  bool pulls_from_peer() const noexcept { return pulls_from_peer_; }
  // Progress thread: copies the payload `d` names out of the peer's memory
  // into dest (on an opener thread when large), tells the peer it is
  // released, then calls `done`.
  void pull_into(const pull::Descriptor& d, void* dest, std::function<void(const std::string& error)> done);
  // Progress thread: a header-only pull control message on the lane.
  void send_control(std::vector<std::byte> message);
  void deliver(Incoming& message);
  // The endpoint failed (peer gone, or connecting failed).
  void fail(ucs_status_t status);
  // A message failed to authenticate: logged, the endpoint dropped, the
  // error handler told; nothing of the message is delivered.
  void reject(const std::string& why);
  // The peer is gone (it failed or closed): the endpoint dropped, the error handler told.
  void end(const std::string& reason);
  // The peer's close notice, which counted `bulk_sent` messages on its bulk
  // lane: the connection ends once they all arrived and their rendezvous
  // payloads landed; those may come after the notice, on another endpoint.
  void peer_closed(std::uint64_t bulk_sent);
  // A message came on the peer's bulk lane (the endpoint it came on was bulk_in_).
  bool came_on_bulk_lane(ucp_ep_h reply_ep) noexcept {
    if (reply_ep != bulk_in_ || bulk_in_ == nullptr) return false;
    ++bulk_received_;
    return true;
  }
  // Rendezvous payloads of messages from the bulk lane: one started, one landed.
  void payload_landing() noexcept { ++payloads_landing_; }
  void payload_landed();
  // The peer closed and what it sent on its bulk lane is all here: ends the connection.
  void settle_close();
  ucp_ep_h endpoint() const noexcept { return ep_; }
  // How a connection's endpoints go: flushed (close()), at once where the
  // peer is gone or failed (the lane still flushed: it cannot be forced), or
  // at once where the peer stopped answering (abort(): the lane, which
  // neither a flush nor a force could close, is left to its worker's end).
  // flushed: close(); peer_leaving: close_after_goodbye(); peer_gone: the
  // peer failed or closed; peer_silent: abort().
  enum class Ending { flushed, peer_leaving, peer_gone, peer_silent };
  // Whether what was sent still leaves before the endpoints close.
  static bool flushes(Ending how) noexcept { return how == Ending::flushed || how == Ending::peer_leaving; }
  void close_now(Ending how);
  // close() or abort() from any thread.
  void close_from(Ending how);

  struct SendOp;  // one send in flight, owned by UCX's request until it completes
  struct BatchOp;  // header-only sends gathered into one AM

  // Progress thread: sends what start_send gathered (Worker::Impl::batching).
  void flush_batch();
  // Progress thread: what is gathered may wait for its cork to run out
  // (nothing but send_soon messages).
  bool corked() const noexcept { return !batched_.empty() && !batched_urgent_; }

 private:
  // Progress thread: sends op's header with a descriptor of its payload,
  // which stays op's until the peer releases it (or the connection ends).
  void send_pulled(std::unique_ptr<SendOp> op);
  void release(std::uint64_t token, const std::string& error);
  // Every payload the peer has not released yet: `done` with `reason`.
  void fail_pulled(const std::string& reason);
  void send_probe();
  void queue(SendOp* op);
  void start_send(SendOp* op);
  void send_now(std::unique_ptr<SendOp> op);
  // Progress thread: flushes one endpoint, then calls `done`.
  void flush_endpoint(ucp_ep_h ep, std::function<void(const std::string& error)> done);
  // Progress thread: flushes every endpoint from the `step`th on, then calls `done`.
  void flush_from(int step, std::function<void(const std::string& error)> done);
  // Forgets every endpoint and closes them.
  void drop_endpoints(Ending how);
  // Every endpoint this connection has, null where it has none.
  struct Endpoints {
    ucp_ep_h ep, lane, bulk_out, bulk_in;
    std::uint64_t bulk_sent;  // what the close notice counts (bulk_sent_)
    bool lane_handled;        // the lane has peer error handling (lane_handled_)
  };
  // Takes them out of the worker's map (no message reaches this connection
  // through them any more) and out of this object.
  Endpoints take_endpoints();
  // Progress thread: closes what take_endpoints took, in the order they must go.
  static void close_endpoints(Worker::Impl& impl, const Endpoints& eps, Ending how);
  std::shared_ptr<ConnectionImpl> self() { return std::static_pointer_cast<ConnectionImpl>(shared_from_this()); }

  std::shared_ptr<Worker> worker_;  // first: the parent outlives the child's members
  Worker::Impl& impl_;
  std::atomic<bool> closed_{false};
  std::string peer_;
  Worker::Addresses local_addresses_;
  ucp_ep_h ep_ = nullptr;    // the control endpoint: peer error handling, liveness
  ucp_ep_h lane_ = nullptr;  // the shared-memory lane, when agreed: carries every message
  // Bulk lanes, when agreed: this end's messages with a payload go out on
  // bulk_out_, the peer's come in on bulk_in_ (protocol::Lane::bulk).
  ucp_ep_h bulk_out_ = nullptr;
  ucp_ep_h bulk_in_ = nullptr;
  // The close notice's count: an eager message on a bulk lane could arrive
  // after the notice, which took the control endpoint (protocol.md).
  std::uint64_t bulk_sent_ = 0;      // messages this end started on bulk_out_
  std::uint64_t bulk_received_ = 0;  // the peer's that arrived on bulk_in_
  std::size_t payloads_landing_ = 0;  // of those, rendezvous payloads UCX is still receiving
  std::optional<std::uint64_t> peer_bulk_sent_;  // the peer closed, having sent this many
  // The control endpoint failed: it can only be force-closed from now on.
  bool failed_ = false;
  // A lane this end accepted: a peer that fails may have left a bye on it (fail()).
  bool lane_accepted_ = false;
  bool lane_handled_ = false;
  // Shared so that a handler replacing the handlers does not destroy itself mid-call.
  std::shared_ptr<const MessageHandler> on_message_;
  std::shared_ptr<const ErrorHandler> on_error_;
  std::unique_ptr<SecureChannel> channel_;  // null: plaintext
  std::mutex seal_mutex_;                   // sealing and queueing, one message at a time
  std::vector<std::unique_ptr<SendOp>> batched_;  // progress thread: gathered, not yet sent
  std::size_t batched_bytes_ = 0;
  bool batched_urgent_ = false;  // a message in batched_ came from send(), not send_soon()
  std::atomic<bool> corked_{false};  // batched_ may hold send_soon messages: push() has work
  std::atomic<bool> gather_soon_{true};  // whether send_soon gathers (Worker::Impl::sends_are_system_calls)
  // Pulled payloads (pull.hpp), progress thread only unless atomic.
  pid_t peer_pid_ = 0;             // proven by the bootstrap; 0: this end never reads the peer
  bool accepted_ = false;          // this end accepted the dial: it probes in answer
  bool probe_sent_ = false;
  bool pulls_from_peer_ = false;   // the peer's probe read back right
  std::atomic<bool> peer_pulls_{false};  // ours did: payloads from pull_from on go as descriptors
  pull::ProbeBytes probe_{};       // random; the peer reads them out of this process
  std::uint64_t next_pull_ = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<SendOp>> pulled_;  // named to the peer, not yet released
};

// The worker's AM handler for ferry_am_id; `arg` is the Worker::Impl.
ucs_status_t am_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                        const ucp_am_recv_param_t* param);
// The worker's AM handler for ferry_batch_am_id: each frame delivered as a message of its own.
ucs_status_t batch_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                           const ucp_am_recv_param_t* param);
// The worker's AM handler for ferry_close_am_id: the peer closed its end.
ucs_status_t close_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                           const ucp_am_recv_param_t* param);
// The worker's AM handler for ferry_pull_am_id: a message whose payload this end pulls.
ucs_status_t pull_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                          const ucp_am_recv_param_t* param);
// The worker's AM handler for ferry_pull_control_am_id.
ucs_status_t pull_control_receive(void* arg, const void* header, std::size_t header_length, void* data,
                                  std::size_t length, const ucp_am_recv_param_t* param);
// The endpoints' error handler; `arg` is the Worker::Impl.
void endpoint_failed(void* arg, ucp_ep_h ep, ucs_status_t status);

}  // namespace ferry::transport
