// The inside of a Worker: UCP handles, the progress thread and what only that
// thread touches. Shared by the transport's sources.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <memory>
#include <span>
#include <vector>
#include <unordered_map>
#include <unordered_set>

#include "ferry/transport/worker.hpp"
#include "slab_registry.hpp"
#include "crypto_threads.hpp"
#include "staging_pool.hpp"

namespace ferry::transport {

class ConnectionImpl;

// The one AM id every Ferry message travels under; the connection is found
// from the reply endpoint (all sends carry UCP_AM_SEND_FLAG_REPLY).
inline constexpr unsigned ferry_am_id = 0;
// An empty message a closing end sends last: endpoints made from worker
// addresses have no connection manager to tell the peer they closed.
inline constexpr unsigned ferry_close_am_id = 1;
// Several header-only messages of one connection in one AM, its payload
// frames of [u32 length][header] (send_op.hpp, connection_send.cpp).
inline constexpr unsigned ferry_batch_am_id = 2;
// A message whose payload the receiver pulls out of the sender's memory: its
// AM header is a pull::Descriptor, then the message's header (pull.hpp).
inline constexpr unsigned ferry_pull_am_id = 3;
// What the two ends of a shared-memory lane say about pulls: probe, probed,
// released (pull::Control).
inline constexpr unsigned ferry_pull_control_am_id = 4;

// A worker's parameters: one thread at a time calls into it.
ucp_worker_params_t serialized_worker_params();

// Throws UcxError "<what>: <UCX's reason>" unless status is UCS_OK.
void check(ucs_status_t status, const std::string& what);
[[noreturn]] void throw_ucx(ucs_status_t status, const std::string& what);

// "ip:port" ("[ip6]:port") of a socket address.
std::string format_sockaddr(const sockaddr_storage& address);
std::uint16_t sockaddr_port(const sockaddr_storage& address);
// host:port as a socket address (IPv4 preferred); throws UcxError naming
// the address when the host does not resolve. An empty host means any.
socklen_t resolve(const std::string& host, std::uint16_t port, sockaddr_storage& out);

struct Worker::Impl {
  std::string name;
  ucp_context_h context = nullptr;
  // A UCX worker of the context, and what belongs to it alone. A server
  // makes a new one every `sessions_per_generation` connections and
  // destroys an old one once its last endpoint has closed: UCX 1.13 frees
  // its entry for every peer worker it ever met, and a flush-closed
  // endpoint, only with the worker.
  // The one progress thread drives them all (worker_generations.cpp).
  struct Generation {
    Impl* impl = nullptr;
    ucp_worker_h worker = nullptr;
    int event_fd = -1;
    std::vector<std::uint8_t> address;  // ucp_worker_get_address's, for the peers this generation meets
    std::vector<std::uint8_t> network_address;  // its network transports alone (Worker::addresses)
    std::size_t connections = 0;        // made on it
    std::size_t endpoints = 0;          // open or closing on it
    std::size_t held = 0;               // closed with a flush: kept by UCX until this worker ends
    // Payload sends on its endpoints that UCX has not completed. A flushed
    // close does not wait for a rendezvous send whose peer stopped
    // answering; UCX 1.13 keeps it on the endpoint and asserts if the worker
    // is destroyed under it (ucp_ep.c:437), so the worker is kept meanwhile.
    std::size_t sending = 0;
  };
  // The current generation last. The progress thread's (and a driver's,
  // under `serial`); made and destroyed only there.
  std::vector<std::unique_ptr<Generation>> generations;
  std::unordered_map<ucp_ep_h, Generation*> endpoint_generation;  // every endpoint open or closing
  std::size_t sessions_per_generation = 0;  // Worker::Options; 0: one worker for life
  // The current generation's worker, written under `mutex` (other threads
  // signal it) and null once shut down.
  ucp_worker_h worker = nullptr;
  std::vector<std::uint8_t> address;  // the current generation's, under `mutex`
  std::vector<std::uint8_t> network_address;  // the same, network transports alone
  // The address a dial last sent, and when (Worker::address), under `mutex`:
  // its generation stays a while though it has no endpoint yet.
  std::vector<std::uint8_t> promised;
  std::chrono::steady_clock::time_point promised_at = std::chrono::steady_clock::time_point::min();
  // What the progress thread sleeps on: an epoll set holding every
  // generation's event fd, except while a waiting thread drives the worker
  // (drive()).
  int sleep_fd = -1;
  // Shared-memory lanes open on this worker (under `serial`). With one, a
  // driver leaves the event fd where it is: re-arming a shared-memory transport
  // after each drive made the peer signal every message it sent (a loopback
  // round trip of 19-20 µs against 5.3 µs).
  unsigned shared_memory_lanes = 0;
  std::size_t max_am_header = 0;
  std::string transports;
  // No RDMA transport among them: a send to another host is a system call
  // (TCP), which send_soon's gathering saves; over RDMA a send is a store,
  // and gathering would only delay it. (A shared-memory lane gathers: see
  // ConnectionImpl::attach_lane.)
  bool sends_are_system_calls = true;
  // Some transport reaches other hosts: the worker has a network address
  // (Worker::addresses) for peers to make control endpoints from.
  bool has_network_transport = false;

  std::thread thread;
  std::atomic<std::thread::id> thread_id{};

  // Held by the progress thread except while it sleeps in poll(). Another
  // thread that takes it may call into UCX (the worker runs in
  // UCS_THREAD_MODE_SERIALIZED), so a message can leave from the thread that
  // decided to send it without waking the progress thread (run_or_post).
  std::mutex serial;
  std::mutex mutex;  // guards posted and stop
  std::deque<std::function<void()>> posted;
  std::deque<std::function<void()>> spare_posted;  // run_posted's, kept between calls (under `serial`)
  bool stop = false;
  bool sleeping = false;  // the progress thread is (about to be) in poll() and needs a signal
  // The progress thread is between deciding to sleep and waking, signalled
  // (sleeping cleared) or not: a driver that parks the worker's fd
  // meanwhile may eat the signal, and must send it again (drive).
  bool in_poll = false;
  // Set by post(), cleared when the progress thread takes the queue: lets a
  // polling progress thread see new work without taking the mutex.
  std::atomic<bool> has_posted{false};
  // How long the progress thread keeps polling after activity before it
  // sleeps on the event fd (Worker::Options::poll_after_activity).
  std::chrono::microseconds poll_after_activity{0};
  std::chrono::microseconds poll_while_waiting{0};  // Worker::Options::poll_while_waiting
  // A waiting thread drives the worker (wait_here): posting need not signal
  // the sleeping progress thread, the driver runs the queue. Under `mutex`.
  bool driven = false;
  // How long it polls while a payload is moving (poll_for_work).
  static constexpr std::chrono::microseconds transfer_poll{100};
  // Set when the last Worker reference went away on the progress thread
  // itself: the thread cannot join itself, so it tears down and frees this.
  bool self_owned = false;

  // Progress thread only. Open endpoints and the Connection each belongs to;
  // an endpoint leaves the map before it is closed, so nothing arrives for a
  // Connection after close() or its destruction.
  std::unordered_map<ucp_ep_h, ConnectionImpl*> connections;
  std::size_t closing = 0;  // endpoint closes still in flight
  std::unique_ptr<SlabRegistry> slabs;  // registered pool slabs; stopped before the context goes
  bool shutting_down = false;
  StagingPool staging;  // sealed payloads of encrypted connections, any thread
  // While the progress thread runs what was posted, header-only sends of a
  // connection gather (ConnectionImpl::start_send) and leave together once
  // the queue is done: one system call for a burst of replies, not one each.
  bool batching = false;
  std::vector<std::shared_ptr<ConnectionImpl>> to_flush;
  // When the oldest send_soon message in to_flush must leave; max: none.
  // Under `serial`, as to_flush.
  std::chrono::steady_clock::time_point corked_until = std::chrono::steady_clock::time_point::max();
  std::atomic<std::uint64_t> batched_messages{0};
  std::atomic<std::uint64_t> pulled_payloads{0};  // payloads this worker copied out of a peer's memory
  // When the progress thread last came round its loop (steady ns), 0 while
  // it sleeps in poll(): Worker::held_up.
  std::atomic<std::int64_t> round_ns{0};
  void came_round() noexcept {
    round_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  // Rendezvous receives UCX has not completed. UCX 1.13 cannot cancel an AM
  // receive, and one whose sender closed mid-transfer over a lane never
  // completes; once the worker is destroyed nothing can complete them, and
  // shutdown tells their owners so (their buffers are released, not leaked).
  struct Receiving {
    std::function<void(const std::string& error)> done;
    Impl* impl;
    ucp_worker_h worker;  // the generation it came on
    // The connection it came on, when a close from its peer waits for it
    // to land (ConnectionImpl::payload_landed); empty otherwise. Weak: a
    // receive must not keep its connection, and that its worker, alive.
    std::weak_ptr<ConnectionImpl> connection;
  };
  std::unordered_set<Receiving*> receiving;
  std::size_t sending_payloads = 0;  // payload sends UCX has not completed, every generation's

  ~Impl();
  void run();
  void post(std::function<void()> fn);
  // Runs fn here, at once, when the progress thread sleeps and nothing is
  // queued before it; otherwise posts it. Either way fn runs as if on the
  // progress thread (on_progress_thread() is true inside it).
  void run_or_post(std::function<void()> fn);
  // True on the progress thread and inside a function run_or_post runs here.
  bool on_progress_thread() const noexcept;
  // Worker::wait_here.
  bool drive(const std::function<bool()>& ready);
  // The thread that progresses the worker now: the progress thread, or a
  // waiting thread that drives it (not one that only sends, run_or_post).
  bool progressing_here() const noexcept;
  // Wakes the progress thread so it progresses what a function run here left
  // in flight (a send UCX could not finish at once).
  void wake() noexcept;
  // A send_soon message gathered at `now` must leave by `until`; wakes the
  // progress thread when this runs elsewhere, so its sleep ends in time.
  void cork(std::chrono::steady_clock::time_point until);

  // How an endpoint closes. UCX 1.13 frees an endpoint made from a worker
  // address that it closes with a flush only with the worker
  // (ucp_ep_disconnected: "destroyed only when the worker is destroyed");
  // a server worker that outlives its clients kept one or two per session.
  enum class Close {
    force,        // at once, skipping the flush: for endpoints that already failed
    flush,        // after a flush: this end closes and the peer reads on (UCX keeps it until the worker ends)
    flush_force,  // flushed first, then forced, so that UCX frees it (peer error handling only)
  };
  // Progress thread only: closes an endpoint that is no longer in
  // `connections`; shutdown waits for it. `notice` sends the close notice
  // first (unless forced), with `bulk_sent`: the messages this end sent on
  // its bulk lane, which the peer waits for (protocol.md, "Bulk lanes").
  void close_endpoint(ucp_ep_h ep, Close how, bool notice = true, std::uint64_t bulk_sent = 0);
  // The same for an endpoint already released from its generation.
  void close_on(Generation& generation, ucp_ep_h ep, Close how, bool notice, std::uint64_t bulk_sent);

  // Generations (worker_generations.cpp). Makes one on `context` and
  // registers the AM handlers on it; the first becomes current at once.
  Generation& open_generation(ucp_worker_h made = nullptr);
  // Where a new connection's endpoints go: the generation whose address
  // this end gave the peer (`local`), or, with none given, the current
  // one, a new one first when it has made its share. Throws UcxError when
  // the generation `local` names has ended.
  Generation& generation_for(std::span<const std::uint8_t> local);
  void adopt(ucp_ep_h ep, Generation& generation);
  // A payload send on `ep` starts: counted in its generation (returned; null
  // for an endpoint no generation of this worker made) until payload_sent.
  Generation* sending_payload(ucp_ep_h ep);
  static void payload_sent(Generation& generation);
  // An endpoint leaves its generation as its close starts; `closed` when it ends.
  Generation* release(ucp_ep_h ep);
  void closed(Generation* generation);
  // An endpoint not closed at all (a silent peer's lane without error
  // handling, whose flush would hold its worker's destruction): held until
  // its worker ends.
  void leave_open(ucp_ep_h ep);
  // Progresses every generation's worker: how much happened.
  unsigned progress();
  // Arms every generation's worker for the event fd: UCS_ERR_BUSY when one has work.
  ucs_status_t arm();
  // No endpoint open or closing on it and no payload send in flight.
  static bool drained(const Generation& generation);
  // Posts retire_drained when an old `generation` has just drained.
  void retire_if_drained(const Generation& generation);
  // Destroys the generations that are neither current nor in use.
  void retire_drained();
  Worker::Endpoints endpoint_counts() const;

 private:
  bool run_posted();
  void flush_batches(bool all = false);
  bool progress_until_idle();  // true when anything progressed
  bool poll_for_work();
  bool wait(int timeout_ms, std::unique_lock<std::mutex>& serial_lock);
  void shutdown(std::unique_lock<std::mutex>& serial_lock);

 public:
  // Last, so it goes first: its threads finish their jobs (which post to
  // this worker) while the rest is still here.
  CryptoThreads openers{CryptoThreads::default_threads()};
};

}  // namespace ferry::transport
