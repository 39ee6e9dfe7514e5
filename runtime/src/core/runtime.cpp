#include "ferry/runtime/runtime.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/core.hpp"
#include "data/dependencies.hpp"
#include "ferry/config.hpp"
#include "ferry/heap_trim.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/units.hpp"
#include "cuda_port/cuda_module.hpp"
#include "devices/remote/remote_device.hpp"
#include "core/remote_pool.hpp"
#include "devices/remote/remote_policy.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool truthy(const char* name, const char* value) {
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw UsageError(fmt::format("{}={} is not a yes/no value (use 1/0, true/false, on/off)", name, value));
}

// FERRY_* variables override what the program set, so a run can be changed
// without recompiling (as StarPU's STARPU_* variables do).
void apply_environment(Runtime::Options& o) {
  if (const char* v = env("FERRY_WORKERS")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 4096)
      throw UsageError(fmt::format("FERRY_WORKERS={} is not a worker count (1 to 4096)", v));
    o.workers = static_cast<unsigned>(n);
  }
  if (const char* v = env("FERRY_POLICY")) o.policy = parse_policy(v);
  if (const char* v = env("FERRY_TRACE")) {
    o.trace = true;
    o.trace_path = v;
  }
  if (const char* v = env("FERRY_EXPLAIN")) o.explain = truthy("FERRY_EXPLAIN", v);
  if (const char* v = env("FERRY_PERFMODEL_DIR")) o.perf_model_dir = v;
  if (const char* v = env("FERRY_PERFMODELS")) o.persist_perf_models = truthy("FERRY_PERFMODELS", v);
  if (const char* v = env("FERRY_REMOTES")) {
    o.remotes.clear();
    std::string list(v);
    // "a, b" as "a,b": spaces around an entry are not part of its address.
    for (std::size_t begin = 0; begin <= list.size();) {
      const std::size_t end = std::min(list.find(',', begin), list.size());
      const std::size_t first = list.find_first_not_of(" \t\n", begin);
      const std::size_t last = list.find_last_not_of(" \t\n", end == 0 ? 0 : end - 1);
      if (first < end && last != std::string::npos && last >= first)
        o.remotes.push_back(list.substr(first, last - first + 1));
      begin = end + 1;
    }
  }
  if (const char* v = env("FERRY_LISTEN")) o.listen = v;
  if (const char* v = env("FERRY_DISCOVERY_INTERVAL")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds >= 0.05 && seconds <= 86400))
      throw UsageError(fmt::format("FERRY_DISCOVERY_INTERVAL={} is not a number of seconds (0.05 to 86400)", v));
    o.discovery_interval = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  if (const char* v = env("FERRY_REMOTE_POLICY")) o.remote_policy = detail::parse_remote_policy(v);
  if (const char* v = env("FERRY_REMOTE_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds > 0 && seconds <= 3600))
      throw UsageError(fmt::format("FERRY_REMOTE_TIMEOUT={} is not a number of seconds (above 0, at most 3600)", v));
    o.remote_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  if (const char* v = env("FERRY_REMOTE_LIVENESS")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds == 0 || (seconds >= 0.05 && seconds <= 3600)))
      throw UsageError(fmt::format("FERRY_REMOTE_LIVENESS={} is not a number of seconds (0: off, or 0.05 to 3600)", v));
    o.remote_liveness = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  if (const char* v = env("FERRY_COMPILE_LIMIT")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds >= 0.001 && seconds <= 3600))
      throw UsageError(fmt::format("FERRY_COMPILE_LIMIT={} is not a number of seconds (0.001 to 3600)", v));
    o.compile_limit = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  Runtime::read_link_environment(o);
  if (const char* v = env("FERRY_AUTO_CHUNK")) o.auto_chunk = truthy("FERRY_AUTO_CHUNK", v);
  if (const char* v = env("FERRY_CHUNK_BYTES")) o.chunk_bytes = parse_bytes(v);
  if (const char* v = env("FERRY_HOST_TO_HOST")) o.host_to_host = truthy("FERRY_HOST_TO_HOST", v);
  if (const char* v = env("FERRY_GPUS")) o.gpus = v;
  if (const char* v = env("FERRY_GPU_MEMORY")) o.gpu_memory_limit = parse_bytes(v);
  if (const char* v = env("FERRY_GPU_STREAMS")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 64)
      throw UsageError(fmt::format("FERRY_GPU_STREAMS={} is not a stream count (1 to 64)", v));
    o.gpu_streams = static_cast<unsigned>(n);
  }
  if (const char* v = env("FERRY_CHUNK_WINDOW")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n < 1 || n > 1024) throw UsageError(fmt::format("FERRY_CHUNK_WINDOW={} is not a window size (1 to 1024)", v));
    o.chunk_window = static_cast<unsigned>(n);
  }
}

}  // namespace

// One list for the runtime and `ferry check`: a variable added here is
// honoured by both, so the check cannot trust a host the program refuses.
void Runtime::read_link_environment(Options& o) {
  if (const char* v = env("FERRY_TOKEN")) o.token = v;
  if (const char* v = env("FERRY_TOKEN_FILE")) o.token_file = v;
  if (const char* v = env("FERRY_IDENTITY")) o.identity = v;
  if (const char* v = env("FERRY_KNOWN_HOSTS")) o.known_hosts = v;
  if (const char* v = env("FERRY_STRICT_HOST_KEYS")) o.strict_host_keys = truthy("FERRY_STRICT_HOST_KEYS", v);
  if (const char* v = env("FERRY_ENCRYPT_LOOPBACK")) o.encrypt_loopback = truthy("FERRY_ENCRYPT_LOOPBACK", v);
  if (const char* v = env("FERRY_PLAINTEXT")) o.plaintext = truthy("FERRY_PLAINTEXT", v);
}

namespace {

std::shared_ptr<detail::RuntimeCore> make_core(Runtime::Options options) {
  if (options.read_environment) apply_environment(options);
  auto core = std::make_shared<detail::RuntimeCore>(std::move(options));
  core->start();
  return core;
}

}  // namespace

Runtime::Runtime() : Runtime(Options{}) {}

Runtime::Runtime(Options options) : core_(make_core(std::move(options))) {}

Runtime::~Runtime() {
  core_->shutdown();
  core_.reset();
  // Its threads are joined (their caches back in the arenas) and its state
  // freed; the watchers that tick the trim went with it.
  HeapTrim::global().trim_now();
}

std::shared_ptr<detail::BufferState> Runtime::make_buffer(DType dtype, std::size_t rows, std::size_t cols,
                                                          detail::BufferFlags flags) {
  return core_->make_buffer(dtype, rows, cols, flags);
}

Task Runtime::submit_named(std::string_view kernel, detail::Submission submission) {
  auto def = core_->find_kernel(kernel);
  if (!def)
    throw UsageError(fmt::format("task '{}': unknown kernel '{}' (known: {})",
                                 submission.name.empty() ? std::string(kernel) : submission.name, kernel,
                                 fmt::join(core_->kernel_names(), ", ")));
  return core_->submit(core_->prepare(std::move(def), std::move(submission)));
}

Task Runtime::submit_def(const std::shared_ptr<const KernelDef>& kernel, detail::Submission submission) {
  if (!kernel) throw UsageError("submit: the KernelRef is empty");
  return core_->submit(core_->prepare(kernel, std::move(submission)));
}

void Runtime::wait() { core_->wait_all(); }
bool Runtime::wait_for(std::chrono::nanoseconds timeout) { return core_->wait_all_for(timeout); }
std::shared_ptr<MemoryResource> Runtime::host_memory() const noexcept { return core_->host_memory(); }

KernelRef Runtime::add_kernel(KernelDef def) { return core_->add_kernel(std::move(def)); }

KernelRef Runtime::cuda_kernel(std::string source, std::string entry, std::vector<std::string> writes,
                               std::vector<std::string> options) {
  return add_kernel(make_cuda_source_kernel(CudaSource{std::move(source), std::move(entry), std::move(options)},
                                            std::move(writes)));
}

bool Runtime::has_kernel(std::string_view name) const { return core_->find_kernel(name) != nullptr; }
std::vector<std::string> Runtime::kernel_names() const { return core_->kernel_names(); }

KernelRef Runtime::find_kernel(std::string_view name) const {
  auto def = core_->find_kernel(name);
  // The list goes with it: bindings pass this message on as it is.
  if (!def)
    throw UsageError(fmt::format("unknown kernel '{}' (known: {})", name, fmt::join(core_->kernel_names(), ", ")));
  return KernelRef{std::move(def)};
}

void Runtime::load_plugin(const std::filesystem::path& path) {
  const auto before = KernelRegistry::global().names();
  detail::take_registration_errors();  // only this plugin's problems are reported below
  // RTLD_NOW: a plugin with a missing symbol fails here, not in a task.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) throw Error(fmt::format("cannot load plugin {}: {}", path.string(), dlerror()));
  // Never closed: its kernels' code must stay mapped for the life of the process.
  const auto errors = detail::take_registration_errors();
  if (!errors.empty()) {
    std::string all;
    for (const auto& e : errors) all += "\n  " + e;
    throw Error(fmt::format("plugin {} registered kernels with errors:{}", path.string(), all));
  }
  const auto after = KernelRegistry::global().names();
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  log().info("plugin {} added kernels: {}", path.string(), fmt::join(added, ", "));
  for (const auto& d : core_->devices())
    if (const auto* remote = dynamic_cast<const detail::RemoteDevice*>(d.get())) remote->warn_missing(added);
}

void Runtime::add_remote(const std::string& address) { core_->remote_pool().add(address); }
void Runtime::remove_remote(const std::string& address) { core_->remote_pool().remove(address); }
std::uint16_t Runtime::listen_port() const { return core_->remote_pool().listen_port(); }

std::vector<DeviceInfo> Runtime::devices() const {
  std::vector<DeviceInfo> out;
  for (const auto& d : core_->devices()) {
    DeviceInfo info{.id = d->id(),
                    .name = d->name(),
                    .kind = d->kind(),
                    .node = d->node(),
                    .lanes = d->lanes(),
                    .tasks_run = d->tasks_run(),
                    .queued = d->snapshot().queued,
                    .perf_key = d->perf_key(),
                    .peak = d->peak(),
                    .description = d->name(),
                    .available = d->available(),
                    .down_reason = d->available() ? std::string() : d->down_reason()};
    if (const auto* remote = dynamic_cast<const detail::RemoteDevice*>(d.get())) {
      info.bytes_in = remote->bytes_shipped();
      info.bytes_out = remote->bytes_fetched();
      if (const std::string down = remote->down_reason(); !down.empty())
        info.description = fmt::format("{} (down: {})", d->name(), down);
    }
    // A GPU device exists only where the CUDA module is loaded.
    if (detail::GpuFacts gpu; d->kind() == DeviceKind::cuda && detail::cuda_module()->facts(*d, gpu)) {
      info.bytes_in = gpu.bytes_to_device;
      info.bytes_out = gpu.bytes_from_device;
      info.stream_ordered = gpu.stream_ordered;
      info.bytes_from_peers = gpu.bytes_from_peers;
      info.description = gpu.description;
      info.gpu = gpu.ordinal;
    }
    out.push_back(std::move(info));
  }
  return out;
}

void Runtime::import_device_data(const BufferBase& buffer, int gpu, const void* device_ptr) {
  if (!buffer.valid()) throw UsageError("import_device_data: the buffer is empty");
  const auto& state = *buffer.state();
  if (!state.whole())
    throw UsageError(fmt::format("import_device_data: '{}' is a view; import into a whole buffer", state.name));
  const auto users = detail::users_of(state);
  for (const detail::Use& use : users) detail::release(use.task);
  if (!users.empty())
    throw UsageError(fmt::format("import_device_data: tasks already use '{}'; import into a fresh buffer", state.name));
  if (auto* device = core_->find_device(fmt::format("cuda:{}", gpu));
      device != nullptr && device->kind() == DeviceKind::cuda && detail::cuda_module()->adopt(*device, state, device_ptr))
    return;
  throw UsageError(fmt::format("import_device_data: this runtime has no GPU {} ({})", gpu,
                               config::with_cuda ? "see FERRY_GPUS and ferry info" : "built without CUDA"));
}

Runtime::Recovery Runtime::recovery() const noexcept { return core_->recovery(); }

Runtime::RemoteStats Runtime::remote_stats(const std::string& address) const {
  const std::string bare = address.starts_with("ucx://") ? address.substr(6) : address;
  auto* remote = dynamic_cast<detail::RemoteDevice*>(core_->find_device("remote:" + bare));
  if (remote == nullptr) throw UsageError(fmt::format("no remote '{}' in this runtime", address));
  RemoteStats out;
  out.bytes_shipped = remote->bytes_shipped();
  out.bytes_fetched = remote->bytes_fetched();
  out.bytes_from_hosts = remote->bytes_from_hosts();
  out.connected = remote->alive();
  const auto offer = remote->offer();
  out.server = offer.server;
  out.kernels = offer.kernels;
  out.server_devices = offer.devices;
  out.quota = offer.quota;
  const auto link = core_->links().get(host_node, remote->node());
  out.latency_seconds = link.latency_seconds;
  out.bytes_per_second = link.bytes_per_second;
  out.down_reason = remote->down_reason();
  out.cipher = remote->cipher();
  out.tasks_forwarded = remote->tasks_forwarded();
  out.lineage_checkpoints = remote->lineage_checkpoints();
  if (out.connected) {
    // A host that dies while it is asked is reported as lost, not thrown:
    // asking after a host is a question, and the answer is that it is gone.
    try {
      const auto s = remote->stats();
      out.server_bytes_in = s.bytes_in;
      out.server_bytes_out = s.bytes_out;
      out.server_tasks = s.tasks;
      out.server_replicas = s.replicas;
      out.server_memory_in_use = s.memory_in_use;
    } catch (const RemoteError& e) {
      out.connected = false;
      out.down_reason = remote->down_reason();
      if (out.down_reason.empty()) out.down_reason = e.what();
    }
  }
  return out;
}

const Runtime::Options& Runtime::options() const noexcept { return core_->options(); }
PerfModels& Runtime::perf_models() { return core_->models(); }
const Trace* Runtime::trace() const noexcept { return core_->trace(); }

TraceSummary Runtime::summary() const {
  if (core_->trace() == nullptr)
    throw UsageError("this runtime records no trace: set Options::trace (or FERRY_TRACE=path)");
  return core_->trace()->summary();
}

void Runtime::write_trace(const std::filesystem::path& path) const {
  if (core_->trace() == nullptr)
    throw UsageError("this runtime records no trace: set Options::trace (or FERRY_TRACE=path)");
  core_->trace()->write_chrome_json(path);
}

std::string Runtime::describe() const {
  std::string devices;
  for (const auto& d : core_->devices()) {
    std::string what = fmt::format("{} ({}, {} run)", d->name(), plural(d->lanes(), "lane"), plural(d->tasks_run(), "task"));
    if (detail::GpuFacts gpu; d->kind() == DeviceKind::cuda && detail::cuda_module()->facts(*d, gpu))
      what = fmt::format("{}, {} run", gpu.description, plural(d->tasks_run(), "task"));
    if (const auto* remote = dynamic_cast<const detail::RemoteDevice*>(d.get()))
      if (const std::string down = remote->down_reason(); !down.empty())
        what = fmt::format("{} (down: {}; {} run)", d->name(), down, plural(d->tasks_run(), "task"));
    devices += (devices.empty() ? "" : ", ") + what;
  }
  return fmt::format("ferry runtime: policy {}; devices: {}", to_string(core_->options().policy), devices);
}

}  // namespace ferry
