// A GPU host running ferryd, as a device of this runtime.
// Tasks placed here run there: their inputs are shipped when missing (on
// assignment when they already exist: prefetch), outputs stay there until
// something on the host needs them. Transfers above the chunk size are split
// and pipelined with a window of chunks in flight.
//
// Proxy threads (not fibers) drive the tasks: each blocks on its task's
// transfers and run reply while the UCX progress thread completes them; a
// few threads give enough tasks in flight to overlap transfers with compute
// (docs/architecture.md says why).
//
// A task whose predecessors were all sent here is forwarded at once, with
// their request ids, and ferryd runs it behind them: a chain on one host
// costs one round trip, not one per task (chain_forwarding.cpp).
//
// If the host goes away, tasks in flight here run on the CPU instead, data
// only it held is recomputed from lineage, and a background thread
// reconnects with backoff; the scheduler uses the host again once it is back.
// A host that dials us (ferryd --connect) is never dialled: the same thread
// waits for it to call again (adopt). A host removed from the pool (retire,
// remote_membership.cpp) is drained and left alone until it rejoins.
//
// Held buffers, work accounting, prefetching, falling back to the CPU, the
// link's trace lanes and measurement are every offload device's
// (devices/offload_device.hpp). The parts this class composes, a header
// each: the connection in use and its requests (remote_requests.hpp), bulk
// data in chunks (bulk_channel.hpp), the host's copies (remote_memory.hpp),
// what the host offers (host_offer.hpp), the proxies' queue
// (proxy_queue.hpp) and a task as a run message (run_message.hpp). Its
// own files: connecting and what comes in (remote_connection.cpp), running
// tasks (remote_device.cpp), chains, host-to-host moves, liveness and
// membership (below).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "data/task_record.hpp"
#include "devices/offload_device.hpp"
#include "devices/remote/bulk_channel.hpp"
#include "devices/remote/forwarded_run.hpp"
#include "devices/remote/host_offer.hpp"
#include "devices/remote/proxy_queue.hpp"
#include "devices/remote/remote_memory.hpp"
#include "devices/remote/remote_requests.hpp"
#include "devices/remote/run_message.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::detail {

class DeviceHost;

struct RemoteOptions {
  std::string address;  // host:port
  transport::DialOptions dial;  // how to sign in (its client name is filled in per connection)
  std::size_t chunk_bytes = std::size_t{4} << 20;
  unsigned window = 4;   // chunks in flight per transfer
  unsigned proxies = 4;  // tasks in flight
  bool host_to_host = true;  // pull copies other remotes hold from them directly (host_to_host.cpp)
  RemotePolicy policy = RemotePolicy::require;
  std::chrono::milliseconds timeout{10000};  // to connect and authenticate under require
  // A connected host not heard from this long while requests wait on it is
  // lost (liveness.cpp); 0: only a failed connection loses it.
  std::chrono::milliseconds liveness{0};
  // The host dials this runtime (ferryd --connect): `address` names it (its
  // host key's fingerprint); connections come through adopt().
  bool reverse = false;
};

class RemoteDevice final : public OffloadDevice {
 public:
  // The UCX worker for each connection: a device that dials gets a new one
  // per connection and lets the old one go once the next is up, because a
  // worker is the only thing that ends UCX 1.13's TCP connections between
  // two processes that both live on (uct_tcp_ep_destroy keeps a socket both
  // ends used open for receiving until the peer closes it, and neither end
  // does): a shared worker kept every connection given up on or removed,
  // one socket per endpoint at each end. A host that dials in arrives on
  // the listener's worker (reverse), which this returns every time.
  using WorkerSource = std::function<std::shared_ptr<transport::Worker>()>;

  RemoteDevice(DeviceHost& runtime, DeviceId id, MemoryNodeId node, RemoteOptions options, WorkerSource workers);
  ~RemoteDevice() override;

  // Connects now. Under RemotePolicy::require a host that cannot be used
  // within the timeout throws RemoteError naming it and why; under prefer
  // it is warned about once and retried in the background (unless it
  // refused us: remote_policy.hpp).
  void start();

  bool can_run(const KernelDef& kernel) const override;
  std::string why_not(const KernelDef& kernel) const override;
  bool available() const noexcept override { return alive() && !retiring_.load(std::memory_order_acquire); }
  unsigned lanes() const override { return options_.proxies; }
  void enqueue(TaskRecord* task) override;
  void prefetch(TaskRecord* task) override;
  bool run_for_waiter(TaskRecord* task, std::chrono::steady_clock::time_point deadline =
                                            std::chrono::steady_clock::time_point::max()) override;
  void push() override;

  // NodeLink
  std::uint64_t epoch() const noexcept override { return epoch_.load(std::memory_order_acquire); }
  std::uint64_t ship(const HostRegion& source) override;
  std::uint64_t allocate(const HostRegion& shape) override;
  void fetch(std::uint64_t id, const HostRegion& dest) override;
  void drop(std::uint64_t id) noexcept override;
  // Host-to-host (host_to_host.cpp): `source` another remote host holding
  // copy `source_id` of `shape`'s region; this host pulls it from there
  // directly. Nothing when it cannot (off, not a dialled remote, refused,
  // the source lost mid-fetch): the caller then moves it through the host.
  std::optional<std::uint64_t> copy_from(NodeLink& source, std::uint64_t source_id, const HostRegion& shape) override;

  // The server's counters for this client (tests and the demo).
  protocol::StatsReply stats();
  const std::string& address() const noexcept { return options_.address; }
  // What the host said in its last welcome.
  using Offer = RemoteOffer;
  Offer offer() const { return offer_.offer(); }
  // Warns when the host lacks any of these kernels (a plugin loaded here only).
  void warn_missing(const std::vector<std::string>& kernels) const;
  std::string down_reason() const override;
  bool pinned_tasks_fail_while_down() const noexcept override { return options_.policy == RemotePolicy::require; }
  // What seals the link: the AEAD's name, or "plaintext"; empty before the first connection.
  std::string cipher() const { return offer_.cipher(); }
  // ---- membership (remote_membership.cpp) ----
  // Progress thread: a connection from the host, which dialled in; replaces
  // the one it had, if any.
  void adopt(transport::Dialed dialed);
  // Leaves the pool: nothing new is placed here, queued tasks move to the
  // CPU, runs in flight finish, data only this host holds comes home, and
  // the connection closes. Blocks until then; idempotent.
  void retire();
  // Back in the pool after retire(): connects again (or waits for the host to).
  void rejoin();
  bool retired() const noexcept { return retiring_.load(std::memory_order_acquire); }
  bool reverse() const noexcept { return options_.reverse; }

  std::size_t bytes_shipped() const noexcept { return bytes_shipped_.load(std::memory_order_relaxed); }
  std::size_t bytes_fetched() const noexcept { return bytes_fetched_.load(std::memory_order_relaxed); }
  std::uint64_t tasks_forwarded() const noexcept { return forwarded_count_.load(std::memory_order_relaxed); }
  // Copies brought home to cut their lineage (checkpoint_on_node).
  std::uint64_t lineage_checkpoints() const noexcept { return checkpoints_.load(std::memory_order_relaxed); }
  // Bytes this host pulled from other hosts directly: none went through this runtime.
  std::size_t bytes_from_hosts() const noexcept { return bytes_from_hosts_.load(std::memory_order_relaxed); }

 private:
  using Forwarded = ForwardedRun;

  void connect();
  // A connection authenticated either way, made on `worker`: ready for
  // tasks once measured.
  void use(transport::Dialed& dialed, std::shared_ptr<transport::Worker> worker);
  // Connects, retrying transient failures until `deadline`; a refusal is thrown at once.
  void connect_until(std::chrono::steady_clock::time_point deadline);
  void welcomed(const protocol::Welcome& welcome);
  // Remembers why the host cannot be used; true the first time (to warn once).
  bool note_down(const std::string& why, bool refused);
  // Waits (options_.timeout) until every endpoint of `connection` is wired up; throws RemoteError.
  void wait_wired(transport::Connection& connection);
  void measure_link();
  void reconnect_loop();
  void lost(const std::string& reason);
  // The end of the connection in use, for `why` (the runtime ending, the
  // host leaving the pool): a Bye and a close, or, where the host does not
  // answer a ping within the liveness limit (2 s at most), a close that does
  // not wait for it.
  void part(const std::string& why);

  // Runs `put`; when the host has no room, evicts the LRU way and runs it once more.
  std::uint64_t with_room(std::size_t bytes, const std::function<std::uint64_t()>& put);
  // ---- host-to-host (host_to_host.cpp) ----
  // Lets the host with key `reader`, signing in with `secret`, read [0, bytes) of copy `id` here.
  void grant_read(std::uint64_t capability, const protocol::Secret& secret, const transport::PublicKey& reader,
                  std::uint64_t id, std::size_t bytes);
  // Has this host pull copy `source_id` from `source` into a new copy; its id.
  std::uint64_t fetch_from(RemoteDevice& source, std::uint64_t capability, const protocol::Secret& secret,
                           std::uint64_t source_id, const HostRegion& shape);
  // Where another ferryd dials this host, and the host key it must present.
  std::pair<std::string, transport::PublicKey> peer_address() const;

  struct Sent {
    std::uint64_t request = 0;
    std::uint64_t epoch = 0;
  };

  void proxy_loop(unsigned slot);
  // Runs the task there; false when it was handed to another device instead.
  bool run_here(TaskRecord* task, unsigned slot);
  // A run's reply: lineage and coherence for ok, the task's error for
  // kernel_failed; throws RemoteError for anything else.
  void settle(TaskRecord* task, const protocol::Done& done, std::span<const std::uint64_t> ids);
  // A run that ended (started at `start`, `start_ns` on the trace's clock):
  // its times, span and perf-model feedback (`cost`), through record_run.
  void report_run(TaskRecord* task, unsigned slot, std::chrono::steady_clock::time_point start,
                  std::int64_t start_ns, std::optional<double> cost);

  // ---- chains (chain_forwarding.cpp) ----
  // Sends a run and records it as sent, so its successors may follow it at once.
  std::future<protocol::Message> send_run(TaskRecord* task, const protocol::Run& run);
  void sent_done(TaskRecord* task);
  // At submission: forwards the task if it can go now, or holds it until its predecessors are sent.
  bool forward_or_hold(TaskRecord* task);
  // At submission, before forwarding: a copy the task writes that is due for
  // a checkpoint comes home once the task's predecessors, all sent here,
  // have finished (this thread waits for them).
  void checkpoint_before_forwarding(TaskRecord* task);
  // Every earlier writer of what the task writes finished: copies of it here
  // due for a checkpoint come home (counted). Throws what the fetch throws.
  void checkpoint_writes(TaskRecord* task);
  // forward_order_mutex_ held; forward_mutex_ too if `map_held`. A task at
  // its submission cannot be claimed meanwhile (its launch holds it back);
  // a held one can, so forward_held keeps the maps locked throughout.
  bool try_forward(TaskRecord* task, bool map_held);
  // forward_order_mutex_ and forward_mutex_ held: `sent` was just sent;
  // the tasks held behind it are looked at again, and those behind each one
  // that goes, in submission order.
  void forward_held(std::uint64_t sent);
  // forward_mutex_ held. A held task is filed under one predecessor not yet
  // sent (held_behind_), so a send looks only at the tasks waiting for it.
  void hold(TaskRecord* task, std::uint64_t behind);
  void unhold(std::uint64_t id);
  // The first of the task's predecessors not sent to this session, if any
  // (none too when one went to a lost session: it is not sent again).
  std::optional<std::uint64_t> unsent_predecessor(const TaskRecord* task) const;
  bool in_place(const BufferState& view, AccessMode mode) const;
  // Takes the task's forwarded run, if any; it is no longer held either way.
  std::shared_ptr<Forwarded> claim(TaskRecord* task);
  // False when the forwarded run did not happen there (refused, host lost): run it again.
  bool finish_forwarded(TaskRecord* task, Forwarded& forwarded, unsigned slot);
  // At the task's finish: what a forwarded run it never claimed still pins.
  void forget_forwarded(std::uint64_t task_id);
  // Sends a CUDA source kernel's definition once per connection.
  void define_kernel(const KernelDef& kernel);
  // Hands the task to the CPU (true), or fails it naming why (false) when
  // it has no CPU implementation, as a CUDA source kernel has not.
  bool fall_back_because(TaskRecord* task, const std::string& why);
  void on_message(transport::Incoming& incoming);

  RemoteOptions options_;
  RemoteRequests requests_;
  BulkChannel bulk_;
  RemoteMemory memory_;
  HostOffer offer_;
  ProxyQueue jobs_;
  WorkerSource workers_;
  // The current connection's worker (the liveness watcher asks it whether
  // this process could listen); the previous one until the next is up.
  std::shared_ptr<transport::Worker> connection_worker() const;
  mutable std::mutex worker_mutex_;
  std::shared_ptr<transport::Worker> worker_;
  std::string host_;
  std::uint16_t port_ = 0;

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::size_t> bytes_shipped_{0};
  std::atomic<std::size_t> bytes_fetched_{0};
  std::atomic<std::size_t> bytes_from_hosts_{0};
  // Sources a direct move from failed recently (unreachable from this host,
  // refused): not tried again until then, so each edge does not wait for a
  // dial that will fail.
  std::mutex direct_mutex_;
  std::map<const RemoteDevice*, std::chrono::steady_clock::time_point> no_direct_until_;
  std::atomic<bool> stopping_{false};
  std::uint64_t quota_ = 0;
  std::atomic<std::uint32_t> gpus_{0};  // as the last welcome said
  std::atomic<bool> refused_{false};    // permanently: never retried

  std::mutex defined_mutex_;
  std::uint64_t defined_epoch_ = 0;  // the connection defined_ is about
  std::set<std::string> defined_;    // kernels defined there

  std::vector<std::thread> proxies_;
  std::vector<int> lanes_;

  // Chains: runs sent and not yet answered, by task id; runs forwarded and
  // not yet claimed; tasks waiting for their predecessors to be sent, in
  // submission order (referenced). Runs go out one at a time, under the
  // order lock, so each follows those it names; the maps have a lock of
  // their own, taken after it, which proxies take briefly.
  std::mutex forward_order_mutex_;
  // try_forward's run, marshalled and encoded under the order lock: reused,
  // so its arguments and `after` keep their capacity (no allocation a forward).
  Marshalled forward_marshalled_;
  std::mutex forward_mutex_;
  RecordMap<std::uint64_t, Sent> sent_;
  RecordMap<std::uint64_t, std::shared_ptr<Forwarded>> forwarded_;
  std::map<std::uint64_t, TaskRecord*> waiting_;  // held (retained)
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> held_behind_;  // predecessor -> held tasks
  std::unordered_map<std::uint64_t, std::uint64_t> held_under_;                // held task -> that predecessor
  std::atomic<std::uint64_t> forwarded_count_{0};
  std::atomic<std::uint64_t> checkpoints_{0};

  std::atomic<bool> retiring_{false};
  std::mutex reconnect_mutex_;
  std::condition_variable reconnect_cv_;
  std::optional<transport::Dialed> adopted_;  // reverse: the host's newest call, not yet in use
  std::thread reconnector_;

  // liveness.cpp: a host that stops answering while its connection stays up.
  void watch_liveness();
  void heard_from() noexcept;
  std::atomic<std::int64_t> last_heard_{0};  // steady_clock ticks of the last message from the host
  // Host-to-host moves out of this host in flight: another host waits on
  // it, so its silence counts as if this runtime's requests waited.
  std::atomic<int> lent_{0};
  std::mutex liveness_mutex_;
  std::condition_variable liveness_cv_;
  std::thread liveness_;
};

}  // namespace ferry::detail
