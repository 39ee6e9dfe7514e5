// UCX's object chain as classes, in the spirit of UCXX: a Worker owns a UCP
// context and worker and the one thread that drives them. That progress
// thread blocks on the worker's event fd when nothing is pending (an idle
// runtime with a connected remote costs no CPU); other threads hand it work
// through a queue and ucp_worker_signal. Every UCX call happens on it,
// except a send started by the sending thread while it sleeps (one thread at
// a time, under the worker's lock: UCS_THREAD_MODE_SERIALIZED).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
class SlabPool;
}

namespace ferry::transport {

class Worker : public std::enable_shared_from_this<Worker> {
 public:
  // The longest a Connection::send_soon message waits for company.
  static constexpr std::chrono::microseconds cork_limit{50};

  struct Options {
    std::string name = "ferry";  // for logs and the progress thread's name
    // How long the progress thread polls after activity before it sleeps
    // (FERRY_UCX_POLL_US overrides): 0 sleeps at once.
    std::chrono::microseconds poll_after_activity{0};
    // How long a thread waiting for something only this worker brings (a
    // reply) drives the worker itself before it blocks (FERRY_UCX_WAIT_POLL_US
    // overrides): see wait_here. 0 blocks at once.
    std::chrono::microseconds poll_while_waiting{100};
    // A server's: after this many connections a new UCX worker takes the
    // next ones, and an old one ends once its last endpoint has closed.
    // UCX 1.13 frees its entry for each peer worker it met, and a
    // flush-closed endpoint, only with the worker; a server whose clients
    // come and go grows by them with every session. A UCX worker costs some
    // 4 MiB and 10 fds (bench/README.md), so this pays only in the tens of
    // thousands. 0: one UCX worker for the Worker's life.
    std::size_t sessions_per_generation = 0;
  };

  // Throws UcxError when UCX cannot be initialised (the message says why,
  // e.g. an unknown transport in UCX_TLS).
  static std::shared_ptr<Worker> create(Options options);
  static std::shared_ptr<Worker> create() { return create(Options{}); }
  ~Worker();  // stops the progress thread; connections close first

  // Runs fn on the progress thread, soon. Thread-safe; callable from the
  // progress thread itself (then it runs after the current callback).
  void post(std::function<void()> fn);
  // Runs fn on the progress thread and waits for it (rethrows what it throws).
  // Must not be called from the progress thread.
  template <typename F>
  auto call(F fn) -> decltype(fn());

  bool on_progress_thread() const noexcept;
  // Called by a thread about to block until `ready()`, when only this
  // worker's progress can make it so (a reply): while the progress thread
  // sleeps, this thread polls the worker itself, for up to the worker's
  // poll_while_waiting, and the reply's callbacks run here. The message is
  // then taken in by the thread that wants it: neither the progress thread
  // nor the waiter is woken on the way. Returns ready(); false also when the
  // progress thread is awake (it delivers) or this is the progress thread.
  bool wait_here(const std::function<bool()>& ready);
  // This worker's UCX address (ucp_worker_get_address), which a peer
  // creates its endpoint from; sent only over the authenticated bootstrap.
  // With generations, the current UCX worker's, kept a while for the dial
  // that sends it (Connection::to_worker's `local_address`). Thread-safe.
  std::vector<std::uint8_t> address();
  // The address, and the same worker's address of its network transports
  // alone (ucp_worker_query's UCP_WORKER_ADDRESS_FLAG_NET_ONLY; empty when
  // it has none), which a peer makes its control endpoint from: on TCP even
  // on one host, where a peer's death is noticed as its socket closes.
  struct Addresses {
    std::vector<std::uint8_t> whole, network;
  };
  Addresses addresses();
  // Registers every slab of `pool` with UCX once (ucp_mem_map): those it
  // has, and each one it adds later; trim() unregisters what it returns.
  // Sends from and receives into pooled memory then hand UCX the handle
  // (UCP_OP_ATTR_FIELD_MEMH), so RDMA transports skip per-transfer
  // registration. Thread-safe; the worker keeps the pool alive until it stops.
  void register_slabs(std::shared_ptr<SlabPool> pool);
  // How many slabs are registered now (after what was queued before this call).
  std::size_t registered_slabs();
  // The transports UCX selected (e.g. "tcp, sysv, posix, self, cma"), for logs and `ferry info`.
  std::string transports() const;
  // Messages that left in a batch with others (sends the progress thread
  // gathered while it ran what was queued): for tests and benchmarks.
  std::uint64_t batched_messages() const noexcept;
  // Payloads this worker copied straight out of a peer's memory (pulled
  // payloads on a shared-memory lane, docs/protocol.md): for tests and benchmarks.
  std::uint64_t pulled_payloads() const noexcept;
  // How long the progress thread has been inside one round of work (a
  // callback, a posted job) without coming back round: zero while it
  // sleeps waiting for messages. What arrives meanwhile is not heard, so a
  // peer's silence over that time says nothing about the peer (liveness).
  std::chrono::nanoseconds held_up() const noexcept;
  // The UCX endpoints this worker has: open (attached to a connection) and
  // closing (a close still in flight), which a closed connection leaves
  // none of; and held: closed with a flush, which UCX 1.13 frees only with
  // its worker once the peer had connected (Connection::close_after_goodbye
  // forces them instead; an older peer's lane cannot be).
  struct Endpoints {
    std::size_t open = 0;
    std::size_t closing = 0;
    std::size_t held = 0;
    std::size_t generations = 1;  // UCX workers alive (Options::sessions_per_generation)
  };
  Endpoints endpoints();

  struct Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

template <typename F>
auto Worker::call(F fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::packaged_task<R()> task(std::move(fn));
  auto future = task.get_future();
  post([&task] { task(); });
  return future.get();
}

}  // namespace ferry::transport
