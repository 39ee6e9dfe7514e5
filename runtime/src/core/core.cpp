#include "core/core.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "ferry/heap_trim.hpp"
#include "data/coherence.hpp"
#include "devices/cpu/cpu_device.hpp"
#include "devices/cuda/cuda_selection.hpp"
#include "cuda_port/cuda_module.hpp"
#include "data/cuda_unified.hpp"
#include "devices/remote/remote_device.hpp"
#include "devices/remote/remote_policy.hpp"
#include "devices/run_record.hpp"
#include "core/remote_pool.hpp"
#include "data/dependencies.hpp"
#include "core/chunked_submission.hpp"
#include "core/data_services.hpp"
#include "base/transfer_label.hpp"
#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/cpus.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/units.hpp"

namespace ferry::detail {

namespace {

std::atomic<std::uint64_t> next_runtime_id{1};

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Options::inline_below_seconds: whether a ready task runs on the submitting thread.
bool runs_inline(const TaskRecord& task, const PerfModels& models, double below_seconds) {
  if (below_seconds <= 0 || task.device->kind() != DeviceKind::cpu) return false;
  const Cost hint = task.kernel->cost ? task.kernel->cost(task.args) : Cost{};
  const Estimate e = models.estimate(task.kernel->name, task.device->perf_key(), task.bytes, hint, task.device->peak());
  return e.calibrated && e.seconds < below_seconds;
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The latest unfinished writer of an overlapping region, as placement
// sees it: where the input will be valid once it is done, if that is a
// remote host (a local GPU's writes are the coherence layer's to predict:
// unified buffers stay valid in place), and when it is expected done.
// Placement happens at submission, often before the writer ran, when the
// coherence layer still says "the host" and "now": a successor of a task
// placed on a remote would otherwise look free to run at home and costly
// to run beside its input, and a successor of a long queue at home would
// look ready to ship at once.
struct PendingWriter {
  bool any = false;
  std::optional<MemoryNodeId> node;
  std::int64_t expected_finish_ns = 0;
};
PendingWriter pending_writer(const BufferState& view) {
  BufferRoot& root = *view.root;
  std::lock_guard lock(root.mutex);
  PendingWriter pending;
  for (const AccessRecord& record : root.records)
    if (record.writer != nullptr && record.region.overlaps(view.region) &&
        !record.writer->done.load(std::memory_order_acquire) && record.writer->device != nullptr) {
      pending.any = true;
      pending.node = record.writer->device->kind() == DeviceKind::remote
                         ? std::optional<MemoryNodeId>(record.writer->device->node())
                         : std::nullopt;
      pending.expected_finish_ns = record.writer->expected_finish_ns;
    }
  return pending;
}

// The task is about to run where it was placed: its estimate joins that
// device's ready backlog, which placement weighs for tasks ready at once.
void count_ready(TaskRecord* task) {
  task->device->now_ready(task->estimate_ns);
  task->counted_ready = true;
}

std::string param_name(const KernelDef& kernel, std::size_t index) {
  return index < kernel.params.size() ? kernel.params[index].name : fmt::format("#{}", index + 1);
}

}  // namespace

RuntimeCore::RuntimeCore(Runtime::Options options)
    : id_(next_runtime_id.fetch_add(1)), options_(std::move(options)), rng_(options_.seed) {
  install_data_host();
  device_slots_.resize(64);  // never reallocated: readers index it without a lock
  pool_ = std::make_unique<RemotePool>(*this);
  // Page-locked with mmap+mlock: a CPU-only runtime never touches CUDA.
  // start_gpus() turns the pool's new slabs to cudaHostAlloc if a GPU is used.
  memory_ = options_.host_memory ? options_.host_memory : std::make_shared<PinnedPool>();
  if (options_.trace || !options_.trace_path.empty()) trace_ = std::make_unique<Trace>();
  if (options_.persist_perf_models) {
    if (options_.perf_model_dir.empty()) options_.perf_model_dir = PerfModels::default_dir();
    models_.load(options_.perf_model_dir);
  }
}

RuntimeCore::~RuntimeCore() { shutdown(); }

void RuntimeCore::start() {
  unsigned workers = options_.workers;
  if (workers == 0) workers = available_cpus();
  add_device([&](DeviceId id) { return std::make_unique<CpuDevice>(*this, id, workers); });
  start_gpus();
  if (options_.remotes.size() + devices().size() > 64)
    throw UsageError(fmt::format("at most 64 devices per runtime: {} remotes do not fit beside {} local devices",
                                 options_.remotes.size(), devices().size()));
  pool_->start();
}

Device& RuntimeCore::add_device(const std::function<std::unique_ptr<Device>(DeviceId)>& make) {
  std::lock_guard lock(devices_mutex_);
  const std::size_t id = device_count_.load(std::memory_order_relaxed);
  if (id >= device_slots_.size())
    throw UsageError(fmt::format("at most {} devices per runtime: no room for another", device_slots_.size()));
  device_slots_[id] = make(static_cast<DeviceId>(id));
  device_count_.store(id + 1, std::memory_order_release);
  return *device_slots_[id];
}

std::shared_ptr<transport::Worker> RuntimeCore::worker() {
  std::lock_guard lock(worker_mutex_);
  if (!worker_) worker_ = new_worker();
  return worker_;
}

std::shared_ptr<transport::Worker> RuntimeCore::new_worker() {
  auto worker = transport::Worker::create(transport::Worker::Options{"ferry-client"});
  // Every host replica lives in this pool: registered once per worker.
  if (auto pool = std::dynamic_pointer_cast<SlabPool>(memory_)) worker->register_slabs(std::move(pool));
  return worker;
}

namespace {

// Why a runtime has no GPU device, in words a user can act on.
std::string why_no_gpu(const Runtime::Options& options) {
  if (!config::with_cuda) return "Ferry was built without CUDA (FERRY_WITH_CUDA=OFF)";
  // gpus = "none" never probes: that would load the CUDA module.
  if (selects_no_gpu(options.gpus)) return "Options::gpus is \"none\" (FERRY_GPUS)";
  const std::string& reason = cuda::unavailable_reason();
  return reason.empty() ? fmt::format("none selected by Options::gpus \"{}\" (FERRY_GPUS)", options.gpus) : reason;
}

// A place no device of this runtime is: a GPU or a remote host it does not
// have. Empty when some device is that place (it may still be unable to run
// the kernel, or be down: the caller says so).
std::string missing_place(const Place& place, std::span<const std::unique_ptr<Device>> devices,
                          const Runtime::Options& options) {
  std::vector<std::string> gpus, remotes;
  for (const auto& device : devices) {
    if (device->matches(place)) return {};
    if (device->kind() == DeviceKind::cuda) gpus.push_back(device->name());
    if (device->kind() == DeviceKind::remote) {
      const std::string& name = device->name();
      remotes.push_back(name.starts_with("remote:") ? name.substr(7) : name);
    }
  }
  switch (place.kind) {
    case Place::Kind::gpu: {
      const std::string which = place.index < 0 ? "no GPU" : fmt::format("no GPU {}", place.index);
      if (gpus.empty()) return fmt::format("{} in this runtime (it has no GPU: {})", which, why_no_gpu(options));
      return fmt::format("{} in this runtime (its GPUs are: {})", which, fmt::join(gpus, ", "));
    }
    case Place::Kind::remote: {
      const std::string which =
          place.endpoint.empty() ? std::string("no remote host") : fmt::format("no remote host '{}'", place.endpoint);
      if (remotes.empty())
        return fmt::format("{} (the runtime has no remotes: see Options::remotes, FERRY_REMOTES)", which);
      return fmt::format("{} (the runtime's remotes are: {})", which, fmt::join(remotes, ", "));
    }
    default: return {};
  }
}

}  // namespace

void RuntimeCore::start_gpus() {
  // "none" does not even probe: a CPU-only run never initialises CUDA.
  if (selects_no_gpu(options_.gpus)) return;
  // Checked on every build, so a bad setting fails the same way everywhere.
  const std::vector<int> ordinals = select_gpus(options_.gpus, cuda::device_count());
  if (ordinals.size() + devices().size() > 64) throw UsageError("at most 63 GPUs per runtime");
  const CudaModule* gpu_module = ordinals.empty() ? nullptr : cuda_module();
  if (gpu_module == nullptr) return;  // none selected: device_count() said why (no module, no driver, no GPU)
  for (int ordinal : ordinals) {
    GpuOptions gpu;
    gpu.ordinal = ordinal;
    gpu.memory_limit = options_.gpu_memory_limit;
    gpu.streams = options_.gpu_streams;
    gpu.chunk_bytes = options_.chunk_bytes;
    gpu.slots = options_.chunk_window;
    try {
      add_device([&](DeviceId id) { return gpu_module->make_device(*this, id, static_cast<MemoryNodeId>(id), gpu); });
    } catch (const Error& e) {
      // Asked for by number, it must work; found by "all", it may be skipped.
      if (!selects_all_gpus(options_.gpus)) throw;
      log().warn("GPU {} is not used: {}", ordinal, e.what());
    }
  }
  // Pinned slabs are made with the first GPU started current: any GPU would
  // do (they are portable), but one not selected would get a CUDA context.
  GpuFacts first;
  for (const auto& device : devices()) {
    if (device->kind() != DeviceKind::cuda || !gpu_module->facts(*device, first)) continue;
    if (auto* pinned = dynamic_cast<PinnedPool*>(memory_.get())) pinned->gpu_in_use(first.ordinal);
    break;
  }
}

std::vector<int> RuntimeCore::gpu_ordinals() const {
  std::vector<int> ordinals;
  GpuFacts gpu;
  for (const auto& device : devices())
    // Only a loaded module makes GPU devices, so cuda_module() loads nothing new here.
    if (device->kind() == DeviceKind::cuda && cuda_module()->facts(*device, gpu)) ordinals.push_back(gpu.ordinal);
  return ordinals;
}

std::shared_ptr<MemoryResource> RuntimeCore::unified_memory() {
  std::lock_guard lock(unified_mutex_);
  if (unified_checked_) return unified_memory_;
  unified_checked_ = true;
  GpuFacts gpu;
  for (const auto& device : devices()) {
    // Only a loaded module makes GPU devices, so cuda_module() loads nothing new here.
    if (device->kind() != DeviceKind::cuda || !cuda_module()->facts(*device, gpu)) continue;
    try {
      unified_memory_ = make_unified_memory(gpu.ordinal);
      return unified_memory_;
    } catch (const Error& e) {
      log().warn("unified buffers: no managed memory on {} ({}); they are ordinary host buffers", device->name(),
                 e.what());
      return nullptr;
    }
  }
  log().debug("unified buffers: this runtime has no GPU ({}); they are ordinary host buffers",
              why_no_gpu(options_));
  return nullptr;
}

void RuntimeCore::reschedule(TaskRecord* task, Device& from) {
  from.unassigned(task->estimate_ns, task->link_ns, task->counted_ready);
  task->placed_again = true;
  task->counted_ready = false;
  task->estimate_ns = 0;
  task->link_ns = 0;
  // Placed again among the devices it was eligible for that are still up
  // (another host of the pool, say); the CPU when none is.
  std::uint64_t others = 0;
  for (std::size_t i = 1; i < devices().size(); ++i)
    if (((task->eligible >> i) & 1) != 0 && devices()[i].get() != &from && devices()[i]->available())
      others |= std::uint64_t{1} << i;
  if (others != 0) {
    place(task, others | (task->eligible & 1));
    log().debug("{}: {} could not run it; placed again on {}", task->label(), from.name(), task->device->name());
    count_ready(task);
    task->device->enqueue(task);
    return;
  }
  Device& cpu = *devices().front();
  task->device = &cpu;
  task->device_name = cpu.shared_name();
  cpu.assigned(0);
  count_ready(task);
  cpu.enqueue(task);
}

Runtime::Recovery RuntimeCore::recovery() const noexcept {
  Runtime::Recovery r;
  r.tasks_placed_again = placed_again_.load(std::memory_order_relaxed);
  r.placed_again_seconds = static_cast<double>(placed_again_ns_.load(std::memory_order_relaxed)) * 1e-9;
  r.lineage_replays = replays_.load(std::memory_order_relaxed);
  r.replay_seconds = static_cast<double>(replay_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return r;
}

Device* RuntimeCore::find_device(std::string_view name) const noexcept {
  for (const auto& d : devices())
    if (d->name() == name) return d.get();
  return nullptr;
}

void RuntimeCore::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  host_views_.end_all_blocking();  // tasks waiting for a view this thread holds would never run
  wait_idle();
  {
    std::lock_guard lock(error_mutex_);
    if (first_error_ && !(first_failed_ && first_failed_->error_reported.load(std::memory_order_acquire)))
      log().warn("a task failed and no wait() reported it: {}", what_of(first_error_));
    first_error_ = nullptr;
    if (first_failed_ != nullptr) release(std::exchange(first_failed_, nullptr));
  }
  // No host joins or leaves from here on.
  pool_->stop();
  for (auto& device : devices()) device->drain();
  // Remotes first: they bring home data only they hold, which may need the CPU.
  for (std::size_t i = device_count_.load(); i-- > 1;) device_slots_[i].reset();
  device_count_.store(0, std::memory_order_release);
  device_slots_[0].reset();
  worker_.reset();
  if (options_.persist_perf_models) {
    try {
      models_.save(options_.perf_model_dir);
    } catch (const std::exception& e) {
      log().warn("could not save performance models to {}: {}", options_.perf_model_dir.string(), e.what());
    }
  }
  if (trace_) {
    if (!options_.trace_path.empty()) {
      try {
        trace_->write_chrome_json(options_.trace_path);
        log().info("trace written to {}", options_.trace_path.string());
      } catch (const std::exception& e) {
        log().error("{}", e.what());
      }
    }
    log().info("{}", trace_->summary().to_text());
  }
}

std::shared_ptr<BufferState> RuntimeCore::make_buffer(DType dtype, std::size_t rows, std::size_t cols,
                                                      BufferFlags flags) {
  const std::size_t element = size_of(dtype);
  if (cols != 0 && rows > SIZE_MAX / cols / element)
    throw UsageError(fmt::format("a {} x {} buffer of {} does not fit in memory", rows, cols, to_string(dtype)));
  auto root = std::make_shared<BufferRoot>();
  root->runtime_id = id_;
  root->runtime = weak_from_this();
  root->memory = memory_;
  if (flags.unified) {
    if (auto managed = unified_memory()) {
      root->memory = std::move(managed);
      root->unified = true;
    }
  }
  root->dtype = dtype;
  root->rows = rows;
  root->cols = cols;
  root->bytes = rows * cols * element;
  root->host = root->memory->allocate(root->bytes);
  // Buffers start zeroed, so a forgotten initialisation is visible, not random.
  if (flags.zero) std::memset(root->host, 0, root->bytes);

  auto state = std::make_shared<BufferState>();
  state->root = std::move(root);
  state->region = Region{0, 0, rows, cols};
  state->id = next_buffer_id_.fetch_add(1, std::memory_order_relaxed);
  state->name = fmt::format("buffer{}", state->id);
  return state;
}

// ---- kernels ----

std::shared_ptr<const KernelDef> RuntimeCore::find_kernel(std::string_view name) const {
  {
    std::lock_guard lock(kernels_mutex_);
    if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
  }
  if (const KernelDef* def = KernelRegistry::global().find(name))
    return std::shared_ptr<const KernelDef>(std::shared_ptr<const KernelDef>{}, def);  // the registry outlives us
  return nullptr;
}

std::vector<std::string> RuntimeCore::kernel_names() const {
  std::vector<std::string> names = KernelRegistry::global().names();
  std::lock_guard lock(kernels_mutex_);
  for (const auto& [name, def] : kernels_) names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

KernelRef RuntimeCore::add_kernel(KernelDef def) {
  if (def.name.empty()) throw UsageError("add_kernel: a kernel needs a name");
  if (!def.cpu && !def.cuda) throw UsageError(fmt::format("add_kernel '{}': no implementation (cpu or cuda)", def.name));
  if (def.cuda_source) {
    {
      std::lock_guard lock(kernels_mutex_);
      if (kernels_.contains(def.name))
        throw UsageError(fmt::format("add_kernel: this runtime already has a kernel named '{}'", def.name));
    }
    // Now, on a thread of the budget's and within its limit, rather than at
    // the first run on a GPU's executor, which every task there waits on.
    compile_cuda_source(*def.cuda_source, gpu_ordinals(), compiles_);
  }
  auto shared = std::make_shared<const KernelDef>(std::move(def));
  std::lock_guard lock(kernels_mutex_);
  if (!kernels_.emplace(shared->name, shared).second)
    throw UsageError(fmt::format("add_kernel: this runtime already has a kernel named '{}'", shared->name));
  return KernelRef{shared};
}

// ---- submission ----

PreparedTask RuntimeCore::prepare(std::shared_ptr<const KernelDef> kernel, Submission submission) const {
  PreparedTask p;
  p.name = submission.name.empty() ? kernel->name : std::move(submission.name);
  p.place = std::move(submission.place);
  p.kernel = std::move(kernel);
  collect_arguments(p, submission);
  check_aliasing(p);
  find_eligible_devices(p);
  return p;
}

void RuntimeCore::collect_arguments(PreparedTask& p, Submission& submission) const {
  const KernelDef& kernel = *p.kernel;
  p.args.items.reserve(submission.args.size());
  for (std::size_t i = 0; i < submission.args.size(); ++i) {
    auto& arg = submission.args[i];
    auto* access = std::get_if<BufferAccess>(&arg);
    if (access == nullptr) {
      p.args.items.emplace_back(std::move(std::get<ScalarValue>(arg)));
      continue;
    }
    const auto where = [&] { return fmt::format("{}: argument {} '{}'", p.label(), i + 1, param_name(kernel, i)); };
    if (!access->state) throw UsageError(fmt::format("{}: the buffer is empty (default-constructed)", where()));
    const BufferRoot& root = *access->state->root;
    if (root.runtime_id != id_)
      throw UsageError(fmt::format("{}: buffer '{}' belongs to another runtime{}", where(), access->state->name,
                                   root.runtime.expired() ? ", which no longer exists" : ""));
    const Region& region = access->state->region;
    const BufferArg buffer{nullptr, root.dtype, region.rows, region.cols, root.cols, access->mode};
    p.bytes += buffer.bytes();
    p.buffers.push_back(std::move(access->state));
    p.buffer_args.push_back(static_cast<std::uint32_t>(i));
    p.args.items.emplace_back(buffer);
  }
  check_arguments(kernel, p.args, p.name);
}

// Two views of one buffer, one of them written, would alias inside a kernel.
void RuntimeCore::check_aliasing(const PreparedTask& p) {
  for (std::size_t a = 0; a < p.buffers.size(); ++a) {
    for (std::size_t b = a + 1; b < p.buffers.size(); ++b) {
      const auto& x = *p.buffers[a];
      const auto& y = *p.buffers[b];
      if (x.root == y.root && x.region.overlaps(y.region) &&
          (writes(p.buffer_arg(a).mode) || writes(p.buffer_arg(b).mode)))
        throw UsageError(fmt::format(
            "{}: arguments {} '{}' and {} '{}' are the same memory ('{}' and '{}') and one is written; pass a copy",
            p.label(), p.buffer_args[a] + 1, param_name(*p.kernel, p.buffer_args[a]), p.buffer_args[b] + 1,
            param_name(*p.kernel, p.buffer_args[b]), x.name, y.name));
    }
  }
}

void RuntimeCore::find_eligible_devices(PreparedTask& p) const {
  const KernelDef& kernel = *p.kernel;
  bool pinned_to_a_down_device = false;
  for (std::size_t i = 0; i < devices().size(); ++i) {
    const Device& device = *devices()[i];
    const bool runs = device.can_run(kernel);
    const bool fits = device.matches(p.place);
    if (runs && fits && device.available()) p.eligible |= std::uint64_t{1} << i;
    else if (runs && fits) pinned_to_a_down_device = true;
  }
  if (p.eligible == 0 && pinned_to_a_down_device) place_elsewhere(p);
  if (p.eligible == 0) {
    if (const std::string missing = missing_place(p.place, devices(), options_); !missing.empty())
      throw UsageError(fmt::format("{} placed {}: {}", p.label(), p.place.describe(), missing));
    // Only now: formatting it for every excluded device cost each submission
    // a few allocations.
    std::string why_not;
    for (const auto& device : devices()) {
      if (!device->can_run(kernel) || !device->matches(p.place)) {
        why_not += fmt::format("; {}: {}", device->name(),
                               !device->can_run(kernel) ? device->why_not(kernel) : "excluded by placement");
      } else if (!device->available()) {
        const std::string reason = device->down_reason();
        why_not += fmt::format("; {}: down{}{}", device->name(), reason.empty() ? "" : ": ", reason);
      }
    }
    throw UsageError(
        fmt::format("{} placed {}: no device of this runtime can run it{}", p.label(), p.place.describe(), why_not));
  }
}

// Every device a task was pinned to is down. Under RemotePolicy::require a
// task pinned to a lost host fails at submit, naming it: a program meant to
// use the host never quietly runs on the CPU instead. Under prefer (and for
// hosts found by discovery) the task runs wherever else it can until the
// host is back, and the log says so once per place. Work already sent to
// the host when it was lost is re-run elsewhere under both (RemoteDevice).
void RuntimeCore::place_elsewhere(PreparedTask& p) const {
  const KernelDef& kernel = *p.kernel;
  std::string down;
  bool fail = false;
  for (const auto& device : devices()) {
    if (!device->can_run(kernel) || !device->matches(p.place) || device->available()) continue;
    const std::string reason = device->down_reason();
    down += fmt::format("{}{}{}{}", down.empty() ? "" : "; ", device->name(), reason.empty() ? " is down" : ": ",
                        reason);
    fail = fail || device->pinned_tasks_fail_while_down();
  }
  if (fail)
    throw RemoteError(fmt::format("{} placed {}: the host is down ({}); under remote_policy=require a task pinned to "
                                  "a host does not run elsewhere (FERRY_REMOTE_POLICY=prefer runs it here meanwhile)",
                                  p.label(), p.place.describe(), down));
  for (std::size_t i = 0; i < devices().size(); ++i)
    if (devices()[i]->can_run(kernel) && devices()[i]->available()) p.eligible |= std::uint64_t{1} << i;
  const std::string where = p.place.describe();
  {
    std::lock_guard lock(down_pins_mutex_);
    if (std::ranges::find(down_pins_warned_, where) != down_pins_warned_.end()) return;
    down_pins_warned_.push_back(where);
  }
  log().warn("tasks placed {} run elsewhere while it is down ({}) (said once per place)", where, down);
}

Task RuntimeCore::submit(const PreparedTask& prepared) { return launch(prepared); }
Task RuntimeCore::submit(PreparedTask&& prepared) { return launch(std::move(prepared)); }

template <typename Prepared>
Task RuntimeCore::launch(Prepared&& prepared) {
  if (shut_down_) throw UsageError(fmt::format("task '{}': the runtime is shutting down", prepared.name));
  auto* task = new TaskRecord;
  task->id = next_task_id_.fetch_add(1, std::memory_order_relaxed);
  task->core = this;
  task->name = std::forward<Prepared>(prepared).name;
  task->kernel = std::forward<Prepared>(prepared).kernel;
  task->args = std::forward<Prepared>(prepared).args;
  task->buffers = std::forward<Prepared>(prepared).buffers;
  task->buffer_args = std::forward<Prepared>(prepared).buffer_args;
  task->bytes = prepared.bytes;
  in_flight_.fetch_add(1, std::memory_order_seq_cst);

  task->eligible = prepared.eligible;
  place(task, prepared.eligible);
  task->join = !prepared.piece && submit_pieces(*task) > 0;
  for (std::size_t i = 0; i < task->buffers.size(); ++i) {
    const AccessMode mode = task->buffer_arg(i).mode;
    // A join reads what its pieces wrote: a failed piece fails it (a data edge).
    register_access(task, *task->buffers[i], task->join && writes(mode) ? AccessMode::readwrite : mode);
  }
  if (!task->join) task->device->prefetch(task);

  Task handle(task);
  if (task->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    TaskRecord* bypass = nullptr;
    std::vector<TaskRecord*> skipped;
    Device* here = runs_inline(*task, models_, options_.inline_below_seconds) ? task->device : nullptr;
    ready(task, here, bypass, skipped);
    for (TaskRecord* t : skipped) finish(t, nullptr);
    if (bypass != nullptr) {
      execute(bypass, *here, -1, -1);
      finish(bypass, nullptr);  // its successors go to the workers: only the short task runs here
    }
  }
  return handle;
}

void RuntimeCore::place(TaskRecord* task, std::uint64_t eligible) {
  Device* chosen = devices()[static_cast<std::size_t>(std::countr_zero(eligible))].get();
  if ((eligible & (eligible - 1)) != 0) {  // more than one (std::popcount is a libgcc call without -mpopcnt)
    const std::int64_t now_ns = steady_ns();
    DecisionInput in;
    in.policy = options_.policy;
    in.kernel = task->kernel->name;
    in.bytes = task->bytes;
    if (task->kernel->cost) in.hint = task->kernel->cost(task->args);
    for (std::size_t i = 0; i < devices().size(); ++i) {
      DeviceSnapshot s = devices()[i]->snapshot();
      s.can_run = (eligible >> i) & 1;
      // A remote's run goes out and its answer comes back over its own link;
      // its performance model leaves that link out.
      if (s.kind == DeviceKind::remote)
        s.round_trip = links_.get(host_node, s.node).latency_seconds + links_.get(s.node, host_node).latency_seconds;
      in.devices.push_back(std::move(s));
    }
    // Every local GPU reads a unified buffer in place: a prefetch, not a copy.
    std::vector<MemoryNodeId> in_place;
    for (const auto& device : devices())
      if (device->kind() == DeviceKind::cuda) in_place.push_back(device->node());
    in.ready_now = true;
    for (std::size_t i = 0; i < task->buffers.size(); ++i) {
      const BufferArg& b = task->buffer_arg(i);
      if (writes(b.mode)) in.output_bytes += b.bytes();
      if (!reads(b.mode)) continue;
      const auto pending = pending_writer(*task->buffers[i]);
      if (pending.any) in.ready_now = false;
      in.inputs.push_back(InputSnapshot{
          b.bytes(),
          pending.node ? std::vector<MemoryNodeId>{*pending.node} : valid_nodes(*task->buffers[i], in_place),
          pending.expected_finish_ns > now_ns ? static_cast<double>(pending.expected_finish_ns - now_ns) * 1e-9 : 0.0});
    }
    in.models = &models_;
    in.links = &links_;
    std::lock_guard lock(rng_mutex_);
    in.rng = &rng_;
    const Decision decision = decide(in);
    for (const auto& device : devices())
      if (device->id() == decision.device) chosen = device.get();
    for (const Candidate& c : decision.candidates)
      if (c.device == decision.device) {
        task->estimate_ns = static_cast<std::int64_t>(c.exec.seconds * 1e9);
        task->expected_finish_ns = now_ns + static_cast<std::int64_t>(c.finish * 1e9);
        task->link_ns = static_cast<std::int64_t>(c.link_seconds * 1e9);
      }
    task->explanation = explain(decision);
    if (options_.explain) log().info("{}:\n{}", task->label(), task->explanation);
  } else if (options_.explain) {
    log().info("{} -> {}: the only eligible device", task->label(), chosen->name());
  }
  task->device = chosen;
  task->device_name = chosen->shared_name();
  chosen->assigned(task->estimate_ns, task->link_ns);
}

// ---- execution ----

void RuntimeCore::execute(TaskRecord* task, Device& device, int worker, int lane) {
  const TaskLabelScope transfers_for(task->name);
  for (std::size_t i = 0; i < task->buffers.size(); ++i) {
    const BufferState& view = *task->buffers[i];
    BufferArg& arg = task->buffer_arg(i);
    // Data another node modified comes home first; a write makes copies elsewhere stale.
    try {
      acquire_on_host(view, arg.mode);
    } catch (const std::exception& e) {
      task->error = std::make_exception_ptr(KernelError(
          fmt::format("{}: input '{}' could not be brought to the host: {}", task->label(), view.name, e.what())));
      return;
    }
    arg.data = view.host_data();
  }
  ExecContext context{task->args, task->name, worker, nullptr, -1, std::nullopt};
  const KernelFn& fn = device.kind() == DeviceKind::cpu ? task->kernel->cpu : task->kernel->cuda;
  const auto start = std::chrono::steady_clock::now();
  try {
    fn(context);
    task->result = context.result;
  } catch (const std::exception& e) {
    task->error = std::make_exception_ptr(
        KernelError(fmt::format("{} failed on {}: {}", task->label(), device.name(), e.what())));
  } catch (...) {
    task->error = std::make_exception_ptr(
        KernelError(fmt::format("{} failed on {}: unknown exception", task->label(), device.name())));
  }
  const auto end = std::chrono::steady_clock::now();
  record_run(*this, device, *task,
             {.start_ns = steady_ns(start),
              .end_ns = steady_ns(end),
              .cost_seconds = std::chrono::duration<double>(end - start).count(),
              .lane = lane,
              .trace_start_ns = std::nullopt});
}

void RuntimeCore::ready(TaskRecord* task, Device* current, TaskRecord*& bypass, std::vector<TaskRecord*>& skipped) {
  if (task->failed_input.load(std::memory_order_acquire) != nullptr || task->join) {
    skipped.push_back(task);
    return;
  }
  count_ready(task);
  if (task->device == current && bypass == nullptr) bypass = task;
  else task->device->enqueue(task);
}

void RuntimeCore::fail_skipped(TaskRecord* task) {
  const TaskRecord* cause = task->failed_input.load(std::memory_order_acquire);
  if (task->join) {  // a piece failed: the task failed, with the piece's reason
    task->error = cause->error;
    return;
  }
  task->error =
      std::make_exception_ptr(KernelError(fmt::format("{} did not run: its input comes from {}, which failed: {}",
                                                      task->label(), cause->label(), what_of(cause->error))));
}

TaskRecord* RuntimeCore::finish(TaskRecord* task, Device* current) {
  TaskRecord* bypass = nullptr;
  std::vector<TaskRecord*> skipped;
  for (;;) {
    if (task->failed_input.load(std::memory_order_acquire) != nullptr && !task->error) fail_skipped(task);
    if (task->placed_again) [[unlikely]] {
      placed_again_.fetch_add(1, std::memory_order_relaxed);
      placed_again_ns_.fetch_add(task->end_ns - task->start_ns, std::memory_order_relaxed);
      HeapTrim::global().released();
    }
    TaskRecord::Edges successors;
    TaskRecord::Continuations continuations;
    {
      std::lock_guard lock(task->mutex);
      task->closed = true;
      successors.swap(task->successors);
      continuations.swap(task->continuations);
    }
    task->buffers.clear();  // the data is released; only the dependency history remains
    task->device->completed(task->estimate_ns, task->link_ns, task->counted_ready);
    if (task->error) {
      std::lock_guard lock(error_mutex_);
      if (!first_error_) {
        first_error_ = task->error;
        retain(task);
        first_failed_ = task;
      }
    }
    task->done.store(true, std::memory_order_release);
    task->done.notify_all();
    if (!continuations.empty()) {
      const Task self(task);
      for (auto& fn : continuations) {
        try {
          fn(self);
        } catch (const std::exception& e) {
          log().error("a continuation of task '{}' threw: {}", task->name, e.what());
        }
      }
    }
    for (const auto& edge : successors) {
      if (edge.data && task->error) mark_failed_input(edge.task, task);
      // An ordered successor was released at this task's launch; a failure
      // here still spoils it (its device checks before keeping its outputs).
      if (!edge.ordered && edge.task->predecessor_finished()) ready(edge.task, current, bypass, skipped);
      release(edge.task);
    }
    if (in_flight_.fetch_sub(1, std::memory_order_seq_cst) == 1 && waiters_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(wait_mutex_);
      wait_cv_.notify_all();
    }
    release(task);  // the runtime's own reference, held since submit
    if (skipped.empty()) return bypass;
    task = skipped.back();
    skipped.pop_back();
  }
}

void RuntimeCore::release_successors(TaskRecord::Edges successors) {
  TaskRecord* bypass = nullptr;  // no device is current: every ready task is queued
  std::vector<TaskRecord*> skipped;
  for (const auto& edge : successors) {
    if (edge.task->predecessor_finished()) ready(edge.task, nullptr, bypass, skipped);
    release(edge.task);
  }
  for (TaskRecord* t : skipped) finish(t, nullptr);
}

void RuntimeCore::wait_idle() noexcept {
  push_held();
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(wait_mutex_);
    wait_cv_.wait(lock, [&] { return in_flight_.load(std::memory_order_seq_cst) == 0; });
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

bool RuntimeCore::wait_all_for(std::chrono::nanoseconds timeout) {
  host_views_.check_wait("Runtime::wait_for()");
  push_held();
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool idle = false;
  {
    std::unique_lock lock(wait_mutex_);
    idle = wait_cv_.wait_for(lock, timeout, [&] { return in_flight_.load(std::memory_order_seq_cst) == 0; });
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  if (!idle) return false;
  wait_all();
  return true;
}

void RuntimeCore::wait_all() {
  host_views_.check_wait("Runtime::wait()");
  wait_idle();
  std::exception_ptr error;
  {
    std::lock_guard lock(error_mutex_);
    error = std::exchange(first_error_, nullptr);
    if (first_failed_ != nullptr) release(std::exchange(first_failed_, nullptr));
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ferry::detail
