#include "devices/remote/remote_device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/transfer_label.hpp"
#include "devices/device_host.hpp"
#include "devices/run_record.hpp"
#include "data/dependencies.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/units.hpp"
#include "data/task_record.hpp"
#include "ferry/allocator/small_objects.hpp"
#include "devices/remote/remote_policy.hpp"

namespace ferry::detail {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Zero-byte chunks would never move a byte, a window or pool of none never send one.
RemoteOptions checked(RemoteOptions options) {
  if (options.chunk_bytes == 0) throw UsageError("remote chunk size must be positive");
  options.window = std::max(1u, options.window);
  options.proxies = std::max(1u, options.proxies);
  return options;
}

DevicePeak remote_peak() {
  DevicePeak peak;  // a seed; measured runs replace it
  peak.flops_per_second = 8e9;
  peak.bytes_per_second = 8e9;
  peak.launch_seconds = 50e-6;
  return peak;
}

}  // namespace

RemoteDevice::RemoteDevice(DeviceHost& runtime, DeviceId id, MemoryNodeId node, RemoteOptions options,
                           WorkerSource workers)
    : OffloadDevice(runtime, id, "remote:" + options.address, DeviceKind::remote, node, "remote:" + options.address,
                    remote_peak(), DeviceHealth::Keep::latest, /*up=*/false),
      options_(checked(std::move(options))),
      requests_(options_.address),
      bulk_(requests_, options_.address, options_.chunk_bytes, options_.window),
      memory_(requests_, bulk_),
      workers_(std::move(workers)) {
  if (!options_.reverse) std::tie(host_, port_) = transport::parse_address(options_.address);
  if (Trace* trace = runtime.trace())
    for (unsigned slot = 0; slot < options_.proxies; ++slot)
      lanes_.push_back(trace->lane(fmt::format("{} slot {}", name(), slot), name()));
  open_link_lanes();
}

void RemoteDevice::start() {
  const bool require = options_.policy == RemotePolicy::require && !options_.reverse;
  if (options_.reverse) {
    // Nothing to dial: the host calls (adopt).
  } else try {
    connect_until(Clock::now() + (require ? options_.timeout : std::chrono::milliseconds(0)));
  } catch (const std::exception& e) {
    const bool refused = dynamic_cast<const RemoteRefused*>(&e) != nullptr;
    // A host that cannot be reached may be done without (prefer); a refusal
    // (a wrong token or key, a host key not pinned or not the pinned one)
    // is a security answer, and the error must not suggest going around it.
    if (require && refused) throw RemoteError(fmt::format("remote {} cannot be used: {}", options_.address, e.what()));
    if (require)
      throw RemoteError(fmt::format("remote {} cannot be used: {} (with FERRY_REMOTE_POLICY=prefer the program runs "
                                    "without it)",
                                    options_.address, e.what()));
    if (note_down(e.what(), refused)) {
      if (refused) log().warn("{}; it is not used (retrying cannot help)", e.what());  // names the host and why
      else log().warn("remote {} cannot be reached: {}; its tasks run here until it answers (retrying)",
                      options_.address, e.what());
    }
  }
  // Models follow what the host is, not where it listens: a restart on
  // another port, or an identical host, starts calibrated. Set before the
  // runtime lists this device; a host down at start keeps its address.
  const Offer offered = offer();
  if (!offered.device_key.empty()) set_perf_key("remote:" + offered.device_key);
  // The host's probe seeds the first estimates, so they are not fixed guesses.
  if (offered.peak_flops > 0 && offered.peak_bytes > 0) {
    DevicePeak measured = peak();
    measured.flops_per_second = offered.peak_flops;
    measured.bytes_per_second = offered.peak_bytes;
    measured.measured = true;
    set_peak(measured);
  }
  for (unsigned slot = 0; slot < options_.proxies; ++slot) proxies_.emplace_back([this, slot] { proxy_loop(slot); });
  reconnector_ = std::thread([this] { reconnect_loop(); });
  if (options_.liveness.count() > 0) liveness_ = std::thread([this] { watch_liveness(); });
}

RemoteDevice::~RemoteDevice() {
  drain();
  // Bring home what only this host holds: buffers may outlive the runtime.
  bring_home("at shutdown");
  {
    std::lock_guard lock(forward_mutex_);
    for (auto& [id, task] : waiting_) release(task);
    waiting_.clear();
    held_behind_.clear();
    held_under_.clear();
  }
  stopping_.store(true);
  jobs_.stop();
  reconnect_cv_.notify_all();
  {
    std::lock_guard lock(liveness_mutex_);  // the watch checks stopping_ under it before it sleeps
  }
  liveness_cv_.notify_all();
  for (auto& thread : proxies_) thread.join();
  if (reconnector_.joinable()) reconnector_.join();
  if (liveness_.joinable()) liveness_.join();
  if (adopted_ && adopted_->connection) adopted_->connection->close();  // a call never used
  part("client shutting down");
}

// ---- memory node ----

std::uint64_t RemoteDevice::with_room(std::size_t bytes, const std::function<std::uint64_t()>& put) {
  try {
    return put();
  } catch (const NoRoom&) {
    // Make room the LRU way, then try once more; still no room is a failure.
    evict(bytes);
    return put();
  }
}

std::uint64_t RemoteDevice::ship(const HostRegion& source) {
  return with_room(source.bytes(), [&] {
    const CopyStart start = copy_starts();
    const std::uint64_t id = memory_.put(source);
    copied_in(bytes_shipped_, start, source.bytes());
    return id;
  });
}

std::uint64_t RemoteDevice::allocate(const HostRegion& shape) {
  return with_room(shape.bytes(), [&] { return memory_.make(shape); });
}

void RemoteDevice::fetch(std::uint64_t id, const HostRegion& dest) {
  const CopyStart start = copy_starts();
  memory_.get(id, dest);
  copied_out(bytes_fetched_, start, dest.bytes());
}

void RemoteDevice::drop(std::uint64_t id) noexcept { memory_.free(id); }

protocol::StatsReply RemoteDevice::stats() {
  const std::uint64_t id = requests_.next_id();
  auto reply = requests_.request(id, protocol::StatsRequest{id}, nullptr, 0);
  protocol::Message m = requests_.await(reply, "stats");
  if (auto* s = std::get_if<protocol::StatsReply>(&m)) return *s;
  throw RemoteError(fmt::format("remote {}: no stats reply", options_.address));
}

// ---- tasks ----

bool RemoteDevice::can_run(const KernelDef& kernel) const {
  // CUDA source travels with its first task: any host with a GPU compiles it.
  if (kernel.cuda_source) return gpus_.load(std::memory_order_relaxed) > 0;
  // Otherwise only kernels known by name: built-ins and plugins (which
  // ferryd loads with --plugin), and of those only what this host said it has.
  // A runtime's own callables stay local.
  return KernelRegistry::global().find(kernel.name) == &kernel && offer_.offers(kernel.name);
}

std::string RemoteDevice::why_not(const KernelDef& kernel) const {
  if (kernel.cuda_source) return "ferryd there has no GPU to compile CUDA source for";
  if (KernelRegistry::global().find(kernel.name) != &kernel)
    return "a kernel defined in this program (a function or lambda) runs only on this machine; a FERRY_KERNEL "
           "plugin loaded by both sides runs anywhere";
  if (!offer_.offers(kernel.name)) return fmt::format("ferryd there has no kernel '{}' (start it with the --plugin that has it)", kernel.name);
  return "no implementation for it";
}

void RemoteDevice::define_kernel(const KernelDef& kernel) {
  const CudaSource& source = *kernel.cuda_source;
  // Held while waiting: a second task of the same kernel must not run before its definition is there.
  std::lock_guard lock(defined_mutex_);
  const std::uint64_t connection = epoch();
  if (defined_epoch_ != connection) {  // a new connection knows nothing yet
    defined_.clear();
    defined_epoch_ = connection;
  }
  if (defined_.contains(kernel.name)) return;
  if (source.source.size() > protocol::max_source_bytes)
    throw ProtocolError(fmt::format("the source of kernel '{}' is {}; at most {} can be sent", kernel.name,
                                    format_bytes(source.source.size()), format_bytes(protocol::max_source_bytes)));
  protocol::DefineKernel define;
  define.request = requests_.next_id();
  define.name = kernel.name;
  define.entry = source.entry;
  define.options = source.options;
  for (const Param& p : kernel.params)
    if (p.kind == ParamKind::buffer && p.mode == AccessMode::write) define.writes.push_back(p.name);
  define.source_bytes = static_cast<std::uint32_t>(source.source.size());
  auto future = requests_.request(define.request, define, source.source.data(), source.source.size());
  const protocol::Message reply = requests_.await(future, "define_kernel");
  const auto* done = std::get_if<protocol::Done>(&reply);
  if (done == nullptr) throw RemoteError("no define_kernel reply");
  if (done->status == protocol::Status::shutting_down)
    throw RemoteError(fmt::format("{}: {}", protocol::to_string(done->status), done->message));
  // Not a RemoteError: another host would refuse the same source, so the task fails.
  if (done->status != protocol::Status::ok)
    throw Error(fmt::format("ferryd refused kernel '{}': {}: {}", kernel.name, protocol::to_string(done->status),
                            done->message));
  if (epoch() == connection) defined_.insert(kernel.name);
}

bool RemoteDevice::fall_back_because(TaskRecord* task, const std::string& why) {
  return fall_back(task, [&] {
    return fmt::format("{} could not run on {} ({}), and the kernel has no CPU implementation to run instead",
                       task->label(), name(), why);
  });
}

void RemoteDevice::enqueue(TaskRecord* task) {
  work().started();
  std::shared_ptr<Forwarded> forwarded;
  {
    std::lock_guard lock(forward_mutex_);
    if (auto it = forwarded_.find(task->id); it != forwarded_.end()) forwarded = it->second;
  }
  jobs_.push_task(task, std::move(forwarded));
}

void RemoteDevice::prefetch(TaskRecord* task) {
  if (!available()) return;
  if (forward_or_hold(task)) return;  // its inputs are there already
  Prefetch job;
  if (!take_prefetch(task, job)) return;
  jobs_.push_prefetch(task, std::move(job.inputs));
}

// The waiting thread takes its task from the queue before a proxy does and
// waits for the reply itself: the reply then wakes the waiter directly,
// instead of a proxy that settles it and wakes the waiter (one hand-off
// less on an empty task's round trip). Only a task already sent (forwarded),
// so what runs here is waiting and settling, as a proxy would. A waiter with
// a deadline waits for the reply first, driving the worker itself as
// Connection::wait_here does, and puts the job back if it has not come.
bool RemoteDevice::run_for_waiter(TaskRecord* task, std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(forward_mutex_);
    if (!forwarded_.contains(task->id)) return false;
  }
  ProxyQueue::Job job;
  // Still queued: no proxy has claimed it (a claim takes the job first).
  if (!jobs_.take_task(task, job)) return false;
  // Only a job whose reply had not come when it was queued has one to wait
  // for; out of the queue, no proxy touches its future meanwhile.
  if (job.forwarded && deadline != std::chrono::steady_clock::time_point::max()) {
    std::future<protocol::Message>& reply = job.forwarded->reply;
    const auto came = [&] { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
    if (auto connection = requests_.connection()) connection->wait_here(came);
    if (!came() && reply.wait_until(deadline) != std::future_status::ready) {
      jobs_.put_back(std::move(job));
      return false;
    }
  }
  if (run_here(task, options_.proxies)) runtime().finish(task, nullptr);  // successors go to their devices
  work().finished();
  return true;
}

void RemoteDevice::push() { requests_.push(); }

void RemoteDevice::proxy_loop(unsigned slot) {
  for (ProxyQueue::Job job; jobs_.take(job); job = {}) {
    if (job.prefetch) {
      Prefetch prefetch{job.task, std::move(job.inputs)};
      run_prefetch(prefetch);
      finish_prefetch(prefetch);
    } else {
      for (TaskRecord* task = job.task; task != nullptr;) task = run_here(task, slot) ? runtime().finish(task, this) : nullptr;
      work().finished();
    }
  }
}

void RemoteDevice::settle(TaskRecord* task, const protocol::Done& done, std::span<const std::uint64_t> ids) {
  if (done.status == protocol::Status::kernel_failed) {
    task->error = std::make_exception_ptr(KernelError(
        fmt::format("{} failed on {}: {}", task->label(), name(), done.message)));
    return;
  }
  if (done.status != protocol::Status::ok)
    throw RemoteError(fmt::format("{}: {}", protocol::to_string(done.status), done.message));
  // What the task wrote now lives only there; its lineage recomputes it if the host is lost.
  // Made by the proxy, freed wherever the copy's lineage ends: a small object.
  auto lineage = std::allocate_shared<LineageEntry>(SmallObjectAllocator<LineageEntry>{});
  lineage->task_id = task->id;
  lineage->name = task->name;
  lineage->kernel = task->kernel;
  lineage->args = task->args;
  lineage->buffer_args.assign(task->buffer_args.begin(), task->buffer_args.end());
  for (const auto& view : task->buffers) {
    lineage->roots.push_back(view->root);
    lineage->regions.push_back(view->region);
  }
  for (std::size_t i = 0; i < task->buffers.size(); ++i)
    if (writes(task->buffer_arg(i).mode))
      written_on_node(*task->buffers[i], *this, ids[i], lineage);
  task->result = done.result;
}

void RemoteDevice::report_run(TaskRecord* task, unsigned slot, Clock::time_point start, std::int64_t start_ns,
                              std::optional<double> cost) {
  record_run(runtime(), *this, *task,
             {.start_ns = steady_ns(start),
              .end_ns = steady_ns(Clock::now()),
              .cost_seconds = cost,
              .lane = lanes_.empty() ? 0 : lanes_[slot % lanes_.size()],
              .trace_start_ns = start_ns});
}

bool RemoteDevice::run_here(TaskRecord* task, unsigned slot) {
  // Sent ahead behind its predecessors: only its reply is left to take.
  if (std::shared_ptr<Forwarded> forwarded = claim(task)) {
    if (finish_forwarded(task, *forwarded, slot)) return true;
  }
  if (!alive()) return !fall_back_because(task, "not connected");
  if (retired()) return !fall_back_because(task, "removed from the pool");
  const auto start = Clock::now();
  const std::int64_t start_ns = runtime().trace() ? runtime().trace()->now_ns() : 0;
  std::optional<double> cost;  // what the perf model learns, once the run is done
  Marshalled m;
  try {
    // Unpinned however the run ends, so the copies can be evicted again.
    struct Unpin {
      RemoteDevice& self;
      TaskRecord* task;
      Marshalled& m;
      ~Unpin() {
        self.sent_done(task);
        unpin(task->buffers, m.ids, self);
      }
    } unpin_at_exit{*this, task, m};
    if (task->kernel->cuda_source) define_kernel(*task->kernel);
    // Every earlier writer of what it writes is finished: a copy due for a
    // checkpoint comes home before this run adds to it.
    checkpoint_writes(task);
    marshal(task, task->buffers, *this, requests_.next_id(), m);
    const auto sent = Clock::now();
    auto future = send_run(task, m.run);
    protocol::Message reply = requests_.await(future, "run");
    const double round_trip = seconds_since(sent);
    const auto* done = std::get_if<protocol::Done>(&reply);
    if (done == nullptr) throw RemoteError("no run reply");
    settle(task, *done, m.ids);
    // What the run cost on the host (its kernel and ferryd's handling of it),
    // without the link's latency both ways: hosts of one kind share a model
    // (perf_key), and each one's link is weighed apart
    // (DeviceSnapshot::round_trip), so one host's slow link does not make its
    // twin on a fast one look slow.
    if (done->status == protocol::Status::ok) {
      const double link = runtime().links().get(host_node, node()).latency_seconds +
                          runtime().links().get(node(), host_node).latency_seconds;
      cost = std::max(done->seconds, round_trip - link);
    }
  } catch (const RemoteError& e) {
    if (task->kernel->cpu)  // before handing it over: the CPU may finish and free it at once
      log().warn("{}: {} failed ({}); running it on the CPU", task->label(), name(), e.what());
    if (fall_back_because(task, e.what())) return false;
  } catch (const ProtocolError& e) {  // e.g. arguments too large for one message
    if (task->kernel->cpu)
      log().warn("{} cannot be sent to {} ({}); running it on the CPU", task->label(), name(), e.what());
    if (fall_back_because(task, e.what())) return false;
  } catch (const std::exception& e) {
    task->error =
        std::make_exception_ptr(KernelError(fmt::format("{} failed on {}: {}", task->label(), name(), e.what())));
  }
  report_run(task, slot, start, start_ns, cost);
  return true;
}

}  // namespace ferry::detail
