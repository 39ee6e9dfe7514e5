#include "ferry/transport/worker.hpp"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <ucs/debug/log_def.h>

#include "connection_impl.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "little_endian.hpp"
#include "ucx_tls.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

void throw_ucx(ucs_status_t status, const std::string& what) {
  throw UcxError(what + ": " + ucs_status_string(status), static_cast<int>(status));
}

void check(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK) throw_ucx(status, what);
}

namespace {

// Shutdown waits this long for endpoint closes (flushes) to finish; a peer
// that never answers must not hang the process on exit.
constexpr auto close_deadline = std::chrono::seconds(2);

// The transports UCX offers this context, from the "tl/dev" that ends each
// "resource" line of ucp_context_print_info, e.g. "self, tcp, sysv". UCX has
// no query for them, and which of them an endpoint uses is its own choice.
std::string describe_transports(ucp_context_h context) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "?";
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  std::istringstream lines(std::string(text, size));
  std::free(text);

  std::string result;
  std::set<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("resource") == std::string::npos) continue;
    auto last = line.find_last_of(' ');
    auto slash = line.find('/', last);
    if (last == std::string::npos || slash == std::string::npos) continue;
    auto tl = line.substr(last + 1, slash - last - 1);
    if (!tl.empty() && seen.insert(tl).second) result += (result.empty() ? "" : ", ") + tl;
  }
  return result.empty() ? "none" : result;
}

// A polling thread gives its core away every few polls: when the thread
// that would answer it (the peer's progress thread on the same host, this
// process's own waiter) was placed on the same core, a poll that never
// yields holds that core until its budget ends and the answer waits for it.
// Measured with client and ferryd pinned to one core: a loopback round trip
// of 180-240 µs without yielding, 60-100 yielding every 32 polls, 46-63
// every 16 (which cost the unpinned round trip more). Unpinned, five
// alternating runs each: 37 µs mean yielding every 32, 33 without, within
// this VM's noise. With the core to itself, sched_yield returns at once.
void share_the_core(unsigned& spins) noexcept {
  if (++spins % 32 == 0) sched_yield();
}

// A polling budget from the environment: microseconds from 0 to 100000;
// anything else is named in a warning and `fallback` stays.
std::chrono::microseconds microseconds_from_env(const char* variable, std::chrono::microseconds fallback) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long us = std::strtol(text, &end, 10);
  if (*end != '\0' || us < 0 || us > 100000) {
    log().warn("{}={}: not a number of microseconds from 0 to 100000; ignored", variable, text);
    return fallback;
  }
  return std::chrono::microseconds(us);
}

// The worker whose function run_or_post is running on this thread, if any.
thread_local const Worker::Impl* running_inline = nullptr;
// The worker this (waiting) thread drives, if any (Worker::wait_here).
thread_local const Worker::Impl* driving = nullptr;

void notice_sent(void* request, ucs_status_t, void* user_data) {
  delete static_cast<std::vector<std::byte>*>(user_data);
  ucp_request_free(request);
}

void close_callback(void* request, ucs_status_t status, void* user_data) {
  auto* generation = static_cast<Worker::Impl::Generation*>(user_data);
  if (status != UCS_OK) log().debug("ucx: endpoint closed with {}", ucs_status_string(status));
  --generation->impl->closing;
  generation->impl->closed(generation);
  ucp_request_free(request);
}

struct FlushedClose {
  Worker::Impl::Generation* generation;
  ucp_ep_h ep;
};

// Inside UCX's progress: the forced close is posted, to run after it. The
// flush still counts as a close in flight until then.
void flushed_callback(void* request, ucs_status_t status, void* user_data) {
  auto* flushed = static_cast<FlushedClose*>(user_data);
  if (status != UCS_OK) log().debug("ucx: endpoint flushed with {}", ucs_status_string(status));
  ucp_request_free(request);
  auto* impl = flushed->generation->impl;
  impl->post([impl, generation = flushed->generation, ep = flushed->ep] {
    impl->close_on(*generation, ep, Worker::Impl::Close::force, false, 0);
    --impl->closing;
  });
  delete flushed;
}

// UCX prints "error during flush: Endpoint timeout" itself (ucs_error,
// to stderr) when it flushes an endpoint without peer error handling whose
// peer is gone. Ferry has one such endpoint, an older peer's shared-memory
// lane, and flushes it as it closes (it cannot be forced: close_endpoints); a client
// that said bye and exited at once leaves its ferryd three such raw lines
// for an ordinary exit. The control endpoint reports a peer that is really
// lost, so these go to Ferry's log at debug level; UCX's other messages
// reach its own handler as before.
ucs_log_func_rc_t ucx_log(const char* file, unsigned line, const char*, ucs_log_level_t level,
                          const ucs_log_component_config_t*, const char* format, va_list ap) {
  if (level > UCS_LOG_LEVEL_WARN || std::strstr(format, "error during flush") == nullptr)
    return UCS_LOG_FUNC_RC_CONTINUE;
  char text[512];
  va_list copy;
  va_copy(copy, ap);
  std::vsnprintf(text, sizeof text, format, copy);
  va_end(copy);
  log().debug("ucx: {} ({}:{}; a shared-memory lane whose peer has left)", text, file, line);
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

std::shared_ptr<Worker> Worker::create(Options options) {
  static std::once_flag ucx_log_handler;
  std::call_once(ucx_log_handler, [] { ucs_log_push_handler(ucx_log); });
  auto impl = std::make_unique<Impl>();
  impl->name = options.name;
  impl->poll_after_activity = microseconds_from_env("FERRY_UCX_POLL_US", options.poll_after_activity);
  impl->poll_while_waiting = microseconds_from_env("FERRY_UCX_WAIT_POLL_US", options.poll_while_waiting);

  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  // CMA is left out unless UCX_TLS names it: on an endpoint without peer
  // error handling Debian's UCX 1.13 aborts the process when
  // process_vm_readv meets a peer that died, so one client's kill -9 would
  // take ferryd down. Endpoints with error handling never use CMA, and
  // shared-memory FIFOs and TCP rendezvous lanes measured as fast here
  // (docs/tuning.md).
  if (std::getenv("UCX_TLS") == nullptr) check(ucp_config_modify(config, "TLS", "^cma"), "ucp_config_modify(TLS)");
  // UCX 1.13's shared-memory transports (sysv, posix) offer peer error
  // handling only when asked (it checks the peer's process at UCX's
  // keepalive). With it the shared-memory lane has peer error handling, so
  // it can be force-closed and freed: closed with a flush, UCX keeps a
  // connected endpoint until its worker ends (ucp_ep_disconnected), and a
  // ferryd kept one lane per same-host session. The control endpoint stays
  // on TCP, made from the peer's network address (Connection::to_worker).
  // Only where UCX_TLS lets it open them, as for the TCP settings below: a
  // setting no transport read is a warning on stderr at every worker.
  const char* tls = std::getenv("UCX_TLS");
  if (std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr && std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
      std::getenv("UCX_MM_ERROR_HANDLING") == nullptr && tls_may_open(tls, {"sysv", "posix", "mm", "sm", "shm"}))
    check(ucp_config_modify(config, "MM_ERROR_HANDLING", "y"), "ucp_config_modify(MM_ERROR_HANDLING)");
  // TCP segments of 256 KiB rather than UCX's 64 KiB received and 8 KiB
  // sent: a rendezvous payload travels in 256 KiB fragments, a quarter of
  // the receives (each a system call and a copy out of the segment on the
  // progress thread) and of the sends: loopback ship over TCP about 1.3x
  // faster (docs/tuning.md), where ucx_perftest gains nothing from it.
  // The segment also bounds what UCX sends eagerly, which would then reach
  // 256 KiB: the rendezvous threshold stays at 8 KiB, where UCX put it with
  // its own segments, so an 8-256 KiB payload still goes by rendezvous, as
  // before. Names are those of the tables (TCP_ is the environment's
  // prefix); UCX_TCP_*_SEG_SIZE and UCX_RNDV_THRESH win.
  if (std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr && std::getenv("UCX_TCP_TX_SEG_SIZE") == nullptr &&
      tls_may_open(tls, {"tcp"})) {
    check(ucp_config_modify(config, "RX_SEG_SIZE", "256k"), "ucp_config_modify(RX_SEG_SIZE)");
    check(ucp_config_modify(config, "TX_SEG_SIZE", "256k"), "ucp_config_modify(TX_SEG_SIZE)");
    if (std::getenv("UCX_RNDV_THRESH") == nullptr)
      check(ucp_config_modify(config, "RNDV_THRESH", "8k"), "ucp_config_modify(RNDV_THRESH)");
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  // RMA costs nothing until memory is registered and lets bulk data use rkeys later.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = impl->name.c_str();
  const ucp_worker_params_t worker_params = serialized_worker_params();
  // UCX lists the network interfaces (ucp_init), then opens each (the
  // worker): one that goes away in between (a container's or a test
  // namespace's veth) fails the worker with "No such device". A new
  // context lists the interfaces of the moment.
  ucs_status_t status = UCS_OK;
  ucp_worker_h first = nullptr;
  for (int attempt = 1;; ++attempt) {
    status = ucp_init(&params, config, &impl->context);
    if (status != UCS_OK) {
      impl->context = nullptr;
      break;
    }
    status = ucp_worker_create(impl->context, &worker_params, &first);
    if (status != UCS_ERR_NO_DEVICE || attempt == 5) break;
    ucp_cleanup(impl->context);
    impl->context = nullptr;
    log().debug("ucx: an interface went away while worker '{}' opened it; trying again", impl->name);
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
  }
  ucp_config_release(config);
  if (impl->context == nullptr) {
    throw_ucx(status, std::string("ucp_init (UCX_TLS=") + (tls != nullptr ? tls : "unset") + ")");
  }
  check(status, "ucp_worker_create");
  impl->sleep_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (impl->sleep_fd < 0) {
    ucp_worker_destroy(first);
    throw UcxError(fmt::format("ucx: an epoll set for worker '{}': {}", impl->name, std::strerror(errno)),
                   static_cast<int>(UCS_ERR_IO_ERROR));
  }
  impl->transports = describe_transports(impl->context);
  // By prefix: "rc" stands for rc_verbs and rc_mlx5.
  const auto offers = [&](const char* tl) {
    return impl->transports.starts_with(tl) || impl->transports.find(std::string(", ") + tl) != std::string::npos;
  };
  for (const char* rdma : {"rc", "ud", "dc"})
    if (offers(rdma)) impl->sends_are_system_calls = false;
  for (const char* network : {"tcp", "rc", "ud", "dc"})
    if (offers(network)) impl->has_network_transport = true;
  impl->open_generation(first);
  impl->sessions_per_generation = options.sessions_per_generation;

  impl->slabs = std::make_unique<SlabRegistry>(impl->context, [raw = impl.get()](std::function<void()> fn) {
    raw->post(std::move(fn));
  });
  impl->thread = std::thread([raw = impl.get()] { raw->run(); });
  log().debug("ucx: worker '{}' up; transports {}; max AM header {} bytes", impl->name, impl->transports,
              impl->max_am_header);
  return std::shared_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Worker::~Worker() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
    if (impl_->worker != nullptr) ucp_worker_signal(impl_->worker);
  }
  if (impl_->on_progress_thread()) {
    impl_->self_owned = true;
    impl_->thread.detach();
    impl_.release();  // run() deletes it when it has shut down
    return;
  }
  impl_->thread.join();
}

void Worker::post(std::function<void()> fn) { impl_->post(std::move(fn)); }
bool Worker::on_progress_thread() const noexcept { return impl_->on_progress_thread(); }
bool Worker::wait_here(const std::function<bool()>& ready) { return impl_->drive(ready); }
std::string Worker::transports() const { return impl_->transports; }
std::uint64_t Worker::batched_messages() const noexcept {
  return impl_->batched_messages.load(std::memory_order_relaxed);
}

std::chrono::nanoseconds Worker::held_up() const noexcept {
  const std::int64_t round = impl_->round_ns.load(std::memory_order_relaxed);
  if (round == 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(
      std::max<std::int64_t>(0, std::chrono::steady_clock::now().time_since_epoch().count() - round));
}

std::uint64_t Worker::pulled_payloads() const noexcept {
  return impl_->pulled_payloads.load(std::memory_order_relaxed);
}

void Worker::register_slabs(std::shared_ptr<SlabPool> pool) { impl_->slabs->watch(std::move(pool)); }

std::size_t Worker::registered_slabs() {
  auto count = [this] { return impl_->slabs->registered(); };
  return on_progress_thread() ? count() : call(count);
}

Worker::Endpoints Worker::endpoints() {
  auto count = [this] { return impl_->endpoint_counts(); };
  return on_progress_thread() ? count() : call(count);
}

std::vector<std::uint8_t> Worker::address() { return addresses().whole; }

Worker::Addresses Worker::addresses() {
  std::lock_guard lock(impl_->mutex);
  // A dial sends it and makes its endpoint a round trip later: its
  // generation is not retired meanwhile (worker_generations.cpp).
  impl_->promised = impl_->address;
  impl_->promised_at = std::chrono::steady_clock::now();
  return {impl_->address, impl_->network_address};
}

Worker::Impl::~Impl() {
  if (worker != nullptr)
    for (auto& g : generations) ucp_worker_destroy(g->worker);
  if (context != nullptr) ucp_cleanup(context);
  if (sleep_fd >= 0) ::close(sleep_fd);
}

void Worker::Impl::post(std::function<void()> fn) {
  std::lock_guard lock(mutex);
  posted.push_back(std::move(fn));
  has_posted.store(true, std::memory_order_release);
  // Only a sleeping progress thread needs waking; a busy one looks at the
  // queue before it sleeps, and `sleeping` changes only under this mutex.
  // Nor while a waiting thread drives the worker: it runs the queue, and
  // wakes the progress thread when it stops if anything is left.
  if (sleeping && !driven && worker != nullptr) {
    sleeping = false;
    ucp_worker_signal(worker);
  }
}

bool Worker::Impl::on_progress_thread() const noexcept {
  return running_inline == this || thread_id.load() == std::this_thread::get_id();
}

bool Worker::Impl::progressing_here() const noexcept {
  return driving == this || thread_id.load() == std::this_thread::get_id();
}

// Waking the progress thread for a reply and then the waiter costs two
// sleeps' wake-ups, each tens of microseconds on a VM whose idle vCPU
// halted, several times a loopback round trip. A waiter that polls the
// worker for a short while takes the reply in itself. Only while the
// progress thread sleeps: `serial` says so, and holding it makes this thread
// the one that calls UCX (UCS_THREAD_MODE_SERIALIZED), callbacks included.
// The progress thread may still wake on the event fd meanwhile; it then
// waits for `serial` and finds the work done. A waiter that finds it awake
// keeps trying within its budget: it goes back to sleep soon after.
bool Worker::Impl::drive(const std::function<bool()>& ready) {
  if (ready()) return true;
  if (poll_while_waiting.count() <= 0 || on_progress_thread() || driving != nullptr) return false;
  auto until = std::chrono::steady_clock::now() + poll_while_waiting;
  unsigned spins = 0;
  std::unique_lock held(serial, std::defer_lock);
  while (!held.try_lock()) {
    // The progress thread is awake: it may deliver the reply itself, or go
    // back to sleep in a moment and leave the worker to this thread.
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    share_the_core(spins);
  }
  {
    std::lock_guard lock(mutex);
    if (stop || worker == nullptr) return ready();
    driven = true;
  }
  // The reply this thread takes in would also wake the sleeping progress
  // thread (the worker's fd turns readable), which finds the work done and
  // sleeps again: on two cores a third runnable thread beside this one and
  // the peer's. Out of the progress thread's sleep set while this thread
  // drives, so only the driver sees what arrives. Not beside a
  // shared-memory lane (see shared_memory_lanes).
  // With several generations (a server's) every one would need parking: left where they are.
  const bool one_generation = generations.size() == 1;
  const int parked_fd = one_generation ? generations.front()->event_fd : -1;
  ucp_worker_h parked_worker = worker;
  const bool parked = shared_memory_lanes == 0 && one_generation &&
                      ::epoll_ctl(sleep_fd, EPOLL_CTL_DEL, parked_fd, nullptr) == 0;
  running_inline = this;
  driving = this;
  bool got = false;
  for (;;) {
    run_posted();
    const bool active = progress_until_idle();
    flush_batches();
    if ((got = ready())) break;
    const auto now = std::chrono::steady_clock::now();
    // A payload on its way: its next fragment is microseconds away, as for
    // the progress thread (poll_for_work). Giving up in the middle of a
    // 1 MiB chunk handed the rest to the progress thread, which slept.
    if (active && (!receiving.empty() || sending_payloads != 0)) until = std::max(until, now + transfer_poll);
    if (now >= until) break;
    share_the_core(spins);
  }
  driving = nullptr;
  running_inline = nullptr;
  // Armed again before the fd goes back, so what comes later wakes the
  // progress thread; busy: something came (or a signal) that it must see.
  bool busy = false;
  if (parked) {
    busy = ucp_worker_arm(parked_worker) != UCS_OK;
    epoll_event watch{};
    watch.events = EPOLLIN;
    ::epoll_ctl(sleep_fd, EPOLL_CTL_ADD, parked_fd, &watch);
  }
  bool signal = false;
  {
    std::lock_guard lock(mutex);
    driven = false;
    // Left for the progress thread: work posted meanwhile, a transfer in
    // flight, a corked batch whose time it must keep. Or a wake-up sent to
    // it before this thread parked its fd, which it has not woken to yet:
    // taking the fd out of the sleep set, and arming the worker, ate it.
    signal = in_poll && worker != nullptr &&
             ((parked && !sleeping) || busy || !posted.empty() || !to_flush.empty() || !receiving.empty() ||
              sending_payloads != 0);
    if (signal) {
      sleeping = false;
      ucp_worker_signal(worker);
    }
  }
  return got;
}

void Worker::Impl::run_or_post(std::function<void()> fn) {
  if (on_progress_thread()) return post(std::move(fn));  // after what is queued, in order
  std::unique_lock held(serial, std::try_to_lock);
  bool queue_first = !held.owns_lock();
  if (!queue_first) {
    // Something queued earlier goes first: a thread's messages keep their order.
    std::lock_guard lock(mutex);
    queue_first = !posted.empty() || stop || worker == nullptr;
  }
  if (queue_first) {
    if (held.owns_lock()) held.unlock();
    return post(std::move(fn));
  }
  running_inline = this;
  try {
    fn();
  } catch (const std::exception& e) {
    log().error("ucx: a function run for worker '{}' threw: {}", name, e.what());
  }
  running_inline = nullptr;
}

void Worker::Impl::wake() noexcept {
  std::lock_guard lock(mutex);
  if (worker == nullptr) return;
  sleeping = false;  // signalled: a driver that parks the fd now sends it again
  ucp_worker_signal(worker);
}

bool Worker::Impl::run_posted() {
  // Swapped with `posted` and emptied again: a deque made per call cost two
  // allocations each time the queue had work (its move allocates too).
  std::optional<std::deque<std::function<void()>>> reentered;  // only were this called from a posted function
  auto& batch = spare_posted.empty() ? spare_posted : reentered.emplace();
  {
    std::lock_guard lock(mutex);
    has_posted.store(false, std::memory_order_relaxed);
    if (posted.empty()) return stop;
    batch.swap(posted);
  }
  batching = progressing_here();
  for (auto& fn : batch) {
    try {
      fn();
    } catch (const std::exception& e) {
      log().error("ucx: a function posted to worker '{}' threw: {}", name, e.what());
    }
    fn = nullptr;  // its captures go now, in order, not after the whole batch
  }
  batching = false;
  batch.clear();
  flush_batches();
  return false;
}

void Worker::Impl::cork(std::chrono::steady_clock::time_point until) {
  if (until >= corked_until) return;
  corked_until = until;
  if (!progressing_here()) wake();
}

// Everything gathered leaves, except (unless `all`) batches of send_soon
// messages alone while their cork has time left.
void Worker::Impl::flush_batches(bool all) {
  if (to_flush.empty()) return;
  const bool due = all || std::chrono::steady_clock::now() >= corked_until;
  std::vector<std::shared_ptr<ConnectionImpl>> waiting;
  for (auto& connection : std::exchange(to_flush, {})) {
    if (!due && connection->corked()) waiting.push_back(std::move(connection));
    else connection->flush_batch();
  }
  to_flush = std::move(waiting);
  if (to_flush.empty()) corked_until = std::chrono::steady_clock::time_point::max();
}

bool Worker::Impl::progress_until_idle() {
  bool any = false;
  while (progress() != 0) {
    any = true;
    came_round();
  }
  return any;
}

// Waking a thread that sleeps in poll() costs tens of microseconds on a VM
// whose idle vCPU halted, more than a loopback round trip; a request and
// its reply cross four such sleeps. So after activity the thread may poll
// for a bounded time first: the answer to what it just sent usually comes
// within it. Only after activity, so an idle worker still sleeps. True
// when work came.
//
// While a payload is on its way in or out the thread polls regardless: the
// next fragment is microseconds away, and sleeping between fragments made a
// bulk transfer pay a wake-up every few of them (a 4 MiB ship at half the
// rate of a polling receiver). Bounded as above, so a transfer that stalls,
// or a receive UCX never completes, costs a short poll per wake-up.
bool Worker::Impl::poll_for_work() {
  auto budget = poll_after_activity;
  if (!receiving.empty() || sending_payloads != 0) budget = std::max(budget, transfer_poll);
  if (budget.count() <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + budget;
  unsigned spins = 0;
  do {
    if (has_posted.load(std::memory_order_acquire)) return true;
    if (progress() != 0) return true;
    share_the_core(spins);
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

// Returns false when there is work and the thread must not sleep.
bool Worker::Impl::wait(int timeout_ms, std::unique_lock<std::mutex>& serial_lock) {
  auto status = arm();
  if (status == UCS_ERR_BUSY) return false;
  if (status != UCS_OK) {
    log().error("ucx: ucp_worker_arm: {}; polling every 10 ms instead", ucs_status_string(status));
    timeout_ms = 10;
  }
  // A corked batch bounds the sleep; ppoll, as poll's milliseconds are too coarse for it.
  timespec limit{};
  const timespec* until = nullptr;
  if (timeout_ms >= 0) {
    limit = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    until = &limit;
  }
  if (corked_until != std::chrono::steady_clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(corked_until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (until == nullptr || left < std::chrono::milliseconds(timeout_ms))
      limit = {static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
    until = &limit;
  }
  {
    std::lock_guard lock(mutex);
    if (!posted.empty() || (stop && !shutting_down)) return false;
    sleeping = true;
    in_poll = true;
  }
  pollfd fd{sleep_fd, POLLIN, 0};
  round_ns.store(0, std::memory_order_relaxed);  // asleep: hears what comes at once
  serial_lock.unlock();
  ::ppoll(&fd, 1, until, nullptr);
  serial_lock.lock();
  came_round();
  std::lock_guard lock(mutex);
  sleeping = false;
  in_poll = false;
  return true;
}

void Worker::Impl::run() {
  thread_id = std::this_thread::get_id();
  auto thread_name = (name + "-ucx").substr(0, 15);  // the kernel's limit
  pthread_setname_np(pthread_self(), thread_name.c_str());

  std::unique_lock serial_lock(serial);
  came_round();
  while (!run_posted()) {
    came_round();
    progress_until_idle();
    flush_batches();  // corked batches whose time ran out
    if (poll_for_work()) continue;
    wait(-1, serial_lock);
  }
  shutdown(serial_lock);
  serial_lock.unlock();
  if (self_owned) delete this;
}

void Worker::Impl::close_endpoint(ucp_ep_h ep, Close how, bool notice, std::uint64_t bulk_sent) {
  Generation* generation = release(ep);
  if (generation == nullptr) {
    log().error("ucx: worker '{}': an endpoint to close that no UCX worker of it made", name);
    return;
  }
  close_on(*generation, ep, how, notice, bulk_sent);
}

void Worker::Impl::close_on(Generation& generation, ucp_ep_h ep, Close how, bool notice, std::uint64_t bulk_sent) {
  const bool force = how == Close::force;
  if (!force && notice) {
    // Last on the endpoint, so the peer hears of the close after all else;
    // a peer that is gone already makes it fail, which is fine. With bulk
    // lanes it counts what went on this end's: those may arrive after it.
    // UCX 1.13 reads the header until the send completes, hence its own box.
    std::vector<std::byte>* count = nullptr;
    if (bulk_sent != 0) put_le(*(count = new std::vector<std::byte>), bulk_sent);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    param.cb.send = notice_sent;
    param.user_data = count;
    auto request = ucp_am_send_nbx(ep, ferry_close_am_id, count == nullptr ? nullptr : count->data(),
                                   count == nullptr ? 0 : count->size(), nullptr, 0, &param);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) delete count;
  }
  if (how == Close::flush_force) {
    // The notice and everything before it leave first; a peer that is gone
    // fails the flush, and the endpoint is forced closed all the same.
    ucp_request_param_t flush{};
    flush.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    flush.cb.send = flushed_callback;
    auto* flushed = new FlushedClose{&generation, ep};
    flush.user_data = flushed;
    ++closing;
    auto request = ucp_ep_flush_nbx(ep, &flush);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) return;  // flushed_callback goes on
    delete flushed;
    --closing;
    return close_on(generation, ep, Close::force, false, 0);
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = close_callback;
  param.user_data = &generation;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ++closing;  // before the call, which may end in close_callback (as a send may in its own)
  if (how == Close::flush) ++generation.held;
  auto request = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_ERR(request)) {
    --closing;
    closed(&generation);
    log().debug("ucx: ucp_ep_close_nbx: {}", ucs_status_string(UCS_PTR_STATUS(request)));
  } else if (request == nullptr) {
    --closing;
    closed(&generation);
  }
}

void Worker::Impl::shutdown(std::unique_lock<std::mutex>& serial_lock) {
  flush_batches(true);  // corked ones too, before their endpoints close
  // Connections keep their Worker alive, so none is left here; endpoints
  // whose close is still flushing are, and get a bounded wait.
  // The worker goes next, and every endpoint with it: a flush is enough.
  for (auto& [ep, connection] : connections) close_endpoint(ep, Close::flush);
  connections.clear();
  shutting_down = true;
  auto deadline = std::chrono::steady_clock::now() + close_deadline;
  bool abandon = false;
  for (;;) {
    run_posted();
    progress_until_idle();
    if (closing == 0 && sending_payloads == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      // A peer that stopped answering (SIGSTOP, a partition) holds the
      // close, or a rendezvous send that a flushed close left on its
      // endpoint. UCX 1.13 aborts the process when a worker is destroyed
      // with either in flight (ucp_ep.c:382, "req->flags &
      // UCP_REQUEST_FLAG_RELEASED"; ucp_ep.c:437, the endpoint's requests
      // not empty; the chaos harness met both): the worker and its context
      // are left to the process's end instead, a few MiB.
      log().warn("ucx: worker '{}': {} endpoint close(s) and {} payload send(s) did not finish (a peer that "
                 "stopped answering); the worker is left open rather than destroyed under them",
                 name, closing, sending_payloads);
      abandon = true;
      break;
    }
    wait(50, serial_lock);
  }
  slabs->stop();
  // Other threads signal the worker only under the mutex and only while it
  // is set; UCX may call back into post() from ucp_worker_destroy, so the
  // mutex is not held across it.
  ucp_worker_h doomed = nullptr;
  {
    std::lock_guard lock(mutex);
    std::swap(doomed, worker);
    sleeping = false;
  }
  if (!abandon)
    for (auto& g : generations) ucp_worker_destroy(g->worker);
  generations.clear();  // an abandoned worker is never progressed again: nothing calls back into these
  // Nothing completes a receive now; its owner hears of it once, as from UCX.
  for (auto* op : std::exchange(receiving, {})) {
    std::unique_ptr<Receiving> owned(op);
    try {
      if (owned->done) owned->done("the worker shut down before the payload arrived");
    } catch (const std::exception& e) {
      log().error("ucx: a completion callback threw: {}", e.what());
    }
  }
  if (!abandon) ucp_cleanup(context);
  context = nullptr;
}

}  // namespace ferry::transport
