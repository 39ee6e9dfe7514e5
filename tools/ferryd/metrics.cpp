#include "metrics.hpp"

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "metrics_http.hpp"

namespace ferry::ferryd {
namespace {

prometheus::Counter& counter(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& gauge(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

// Powers of `factor` from `first`: log-spaced buckets across the range that matters.
prometheus::Histogram::BucketBoundaries buckets(double first, double factor, int count) {
  prometheus::Histogram::BucketBoundaries out;
  for (double b = first; count-- > 0; b *= factor) out.push_back(b);
  return out;
}

const char* to_label(Metrics::Direction d) { return d == Metrics::Direction::in ? "in" : "out"; }

const std::string client_defined = "client_defined";  // a kernel a client defined from source

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  tasks_ = &counter(r, "ferry_tasks_total", "Tasks run for clients");
  bytes_in_ = &counter(r, "ferry_bytes_in_total", "Payload bytes received from clients");
  bytes_out_ = &counter(r, "ferry_bytes_out_total", "Payload bytes sent to clients");
  protocol_errors_ = &counter(r, "ferry_protocol_errors_total", "Connections closed for malformed or out-of-order messages");
  clients_ = &gauge(r, "ferry_clients", "Authenticated clients connected now");
  memory_ = &gauge(r, "ferry_memory_in_use_bytes", "Bytes of replicas held for all clients");
  heap_trims_ = &counter(r, "ferry_heap_trims_total",
                         "Times ferryd gave the heap's free pages back to the system once client sessions had ended");
  pool_ = &gauge(r, "ferry_pool_bytes",
                 "Host memory this ferryd's pool has mapped: replicas and staging, and free slabs kept for reuse");
  ucx_endpoints_ = &prometheus::BuildGauge()
                       .Name("ferry_ucx_endpoints")
                       .Help("UCX endpoints of ferryd's clients, by state (open: a connection's; closing: a close "
                             "still in flight; held: closed with a flush, which UCX frees only with the UCX worker "
                             "it was made on: a same-host client's lane per session, and those of sessions ferryd "
                             "ended)")
                       .Register(r);
  ucx_workers_ = &gauge(r, "ferry_ucx_workers",
                        "UCX workers ferryd serves clients on: the current one and older ones that still have a "
                        "session (--ucx-worker-sessions)");
  kernel_tasks_ = &prometheus::BuildCounter()
                       .Name("ferry_kernel_tasks_total")
                       .Help("Tasks finished, by kernel and status (ok, failed)")
                       .Register(r);
  task_seconds_ = &prometheus::BuildHistogram()
                       .Name("ferry_task_seconds")
                       .Help("Kernel time of each task on this host, by kernel")
                       .Register(r);
  client_tasks_ = &prometheus::BuildCounter()
                       .Name("ferry_client_tasks_total")
                       .Help("Tasks finished, by client (key name, or token:host)")
                       .Register(r);
  client_queued_ = &prometheus::BuildGauge()
                        .Name("ferry_client_tasks_queued")
                        .Help("Runs waiting in ferryd for a lane, by client (key name, or token:host)")
                        .Register(r);
  client_started_ = &prometheus::BuildCounter()
                         .Name("ferry_client_tasks_started_total")
                         .Help("Runs given a lane by the fair share, by client (key name, or token:host)")
                         .Register(r);
  client_bytes_in_ = &prometheus::BuildCounter()
                          .Name("ferry_client_bytes_in_total")
                          .Help("Payload bytes received, by client (key name, or token:host)")
                          .Register(r);
  client_bytes_out_ = &prometheus::BuildCounter()
                           .Name("ferry_client_bytes_out_total")
                           .Help("Payload bytes sent, by client (key name, or token:host)")
                           .Register(r);
  transfer_bytes_ = &prometheus::BuildHistogram()
                         .Name("ferry_transfer_bytes")
                         .Help("Size of each payload moved, by direction (in: from clients, out: to them)")
                         .Register(r);
  transfer_seconds_ = &prometheus::BuildHistogram()
                           .Name("ferry_transfer_seconds")
                           .Help("Time each payload took on the wire, by direction")
                           .Register(r);
  auth_failures_ = &prometheus::BuildCounter()
                        .Name("ferry_auth_failures_total")
                        .Help("Connections refused before authentication, by reason")
                        .Register(r);
  quota_refusals_ = &counter(r, "ferry_quota_refusals_total", "Puts refused because a client's quota was reached");
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("ferry_queue_depth")
                      .Help("Tasks assigned to a device of this host and not finished, by device")
                      .Register(r);
  // A gauge set from the runtime's own count at each scrape (it only grows).
  gpu_copy_bytes_ = &prometheus::BuildGauge()
                         .Name("ferry_device_copy_bytes")
                         .Help("Bytes a local GPU copied between host and device memory since start, by device and "
                               "direction (to_device, from_device)")
                         .Register(r);
  device_up_ = &prometheus::BuildGauge()
                    .Name("ferry_device_up")
                    .Help("1 while a device of this host takes tasks, 0 once it is down (a GPU after a sticky CUDA "
                          "error, until ferryd restarts), by device")
                    .Register(r);
  limits_ = &prometheus::BuildGauge().Name("ferry_limit").Help("Configured limits, by name").Register(r);
  build_info_ = &prometheus::BuildGauge()
                     .Name("ferry_build_info")
                     .Help("Always 1; the labels say which ferryd this is")
                     .Register(r);
  nvml_available_ = &gauge(r, "ferry_nvml_available",
                           "1 when NVML (the NVIDIA driver's management library) answers; the ferry_gpu_* "
                           "series exist only then");
  const auto gpu_family = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(r);
  };
  gpu_utilization_ = gpu_family("ferry_gpu_utilization_ratio",
                                "Share of the last sample period a kernel ran, per GPU (NVML)");
  gpu_memory_used_ = gpu_family("ferry_gpu_memory_used_bytes", "Device memory in use by every process, per GPU (NVML)");
  gpu_memory_total_ = gpu_family("ferry_gpu_memory_total_bytes", "Device memory, per GPU (NVML)");
  gpu_temperature_ = gpu_family("ferry_gpu_temperature_celsius", "Core temperature, per GPU (NVML)");
  // Present from the start, so a dashboard's rate() has a series before the first failure.
  for (const char* reason : {"wrong_token", "unknown_key", "handshake_timeout", "version_mismatch", "hung_up", "malformed"})
    auth_failures_->Add({{"reason", reason}});
}

Metrics::~Metrics() = default;

std::uint16_t Metrics::serve(const std::string& host, std::uint16_t port) {
  const auto unusable = [this] { return unusable_ ? unusable_() : std::string(); };
  const auto not_ready = [this, unusable] {
    return ready_.load(std::memory_order_relaxed) ? unusable() : std::string("starting or shutting down");
  };
  http_ = std::make_unique<MetricsHttp>(host, port, MetricsHttp::Routes{[this] { return scrape(); }, not_ready, unusable});
  return http_->port();
}

void Metrics::stop_serving() {
  ready_.store(false);
  http_.reset();
}

std::string Metrics::scrape() {
  std::lock_guard lock(scrape_mutex_);
  if (refresh_) refresh_(*this);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void Metrics::describe_server(const std::string& version, const std::vector<std::string>& kernels) {
  build_info_->Add({{"version", version}}).Set(1);
  kernels_ = {kernels.begin(), kernels.end()};
}

void Metrics::limits(std::uint64_t client_quota, std::uint64_t memory_limit, std::uint64_t max_payload,
                     double handshake_timeout_seconds, unsigned cpu_workers, unsigned gpus) {
  limits_->Add({{"limit", "client_quota_bytes"}}).Set(static_cast<double>(client_quota));
  limits_->Add({{"limit", "memory_limit_bytes"}}).Set(static_cast<double>(memory_limit));
  limits_->Add({{"limit", "max_payload_bytes"}}).Set(static_cast<double>(max_payload));
  limits_->Add({{"limit", "handshake_timeout_seconds"}}).Set(handshake_timeout_seconds);
  limits_->Add({{"limit", "cpu_workers"}}).Set(cpu_workers);
  limits_->Add({{"limit", "gpus"}}).Set(gpus);
}

Metrics::ClientSeries& Metrics::client_series(const std::string& client) {
  // A token client's name is its own choice: "host:pid" names a process;
  // the host is what an operator watches, and only so many get a series.
  // A key's name is the operator's, and each key gets one.
  constexpr std::string_view token = "token:";
  std::string label = client;
  const bool chosen_by_client = label.starts_with(token);
  if (chosen_by_client) {
    std::string_view host = std::string_view(client).substr(token.size());
    if (const auto colon = host.rfind(':'); colon != std::string_view::npos) host = host.substr(0, colon);
    label = std::string(token) + std::string(host.empty() ? "unnamed" : host);
  }
  if (const auto it = client_series_.find(label); it != client_series_.end()) return it->second;
  if (chosen_by_client) {
    if (token_labels_ >= max_client_labels) label = std::string(token) + "other";
    else ++token_labels_;
    if (const auto it = client_series_.find(label); it != client_series_.end()) return it->second;
  }
  ClientSeries series;
  series.labels = {{"client", label}};
  return client_series_.emplace(label, std::move(series)).first->second;
}

template <class T>
T& Metrics::client_metric(const std::string& client, T* ClientSeries::*member, prometheus::Family<T>* family) {
  std::lock_guard lock(series_mutex_);
  ClientSeries& series = client_series(client);
  if (series.*member == nullptr) series.*member = &family->Add(series.labels);
  return *(series.*member);
}

Metrics::KernelSeries& Metrics::kernel_series(const std::string& kernel) {
  static const auto seconds_buckets = buckets(1e-5, 4, 12);  // 10 µs to 42 s
  std::lock_guard lock(series_mutex_);
  const std::string& k = kernels_.contains(kernel) ? kernel : client_defined;
  if (const auto it = kernels_series_.find(k); it != kernels_series_.end()) return it->second;
  return kernels_series_
      .emplace(k, KernelSeries{&kernel_tasks_->Add({{"kernel", k}, {"status", "ok"}}),
                               &kernel_tasks_->Add({{"kernel", k}, {"status", "failed"}}),
                               &task_seconds_->Add({{"kernel", k}}, seconds_buckets)})
      .first->second;
}

void Metrics::task_done(const std::string& kernel, const std::string& client, double seconds, bool ok) {
  tasks_->Increment();
  KernelSeries& k = kernel_series(kernel);
  (ok ? k.ok : k.failed)->Increment();
  if (ok) k.seconds->Observe(seconds);
  client_metric(client, &ClientSeries::tasks, client_tasks_).Increment();
}

void Metrics::client_queue(const std::string& share, std::size_t queued, bool started) {
  client_metric(share, &ClientSeries::queued, client_queued_).Set(static_cast<double>(queued));
  if (started) client_metric(share, &ClientSeries::started, client_started_).Increment();
}

void Metrics::bytes_in(std::uint64_t bytes, const std::string& client) {
  bytes_in_->Increment(static_cast<double>(bytes));
  client_metric(client, &ClientSeries::bytes_in, client_bytes_in_).Increment(static_cast<double>(bytes));
}

void Metrics::bytes_out(std::uint64_t bytes, const std::string& client) {
  bytes_out_->Increment(static_cast<double>(bytes));
  client_metric(client, &ClientSeries::bytes_out, client_bytes_out_).Increment(static_cast<double>(bytes));
}

void Metrics::transfer(Direction direction, std::uint64_t bytes, double seconds) {
  static const auto bytes_buckets = buckets(4096, 4, 12);      // 4 KiB to 16 GiB
  static const auto seconds_buckets = buckets(1e-5, 4, 12);   // 10 µs to 42 s
  transfer_bytes_->Add({{"direction", to_label(direction)}}, bytes_buckets).Observe(static_cast<double>(bytes));
  transfer_seconds_->Add({{"direction", to_label(direction)}}, seconds_buckets).Observe(seconds);
}

void Metrics::auth_failure(const std::string& reason) { auth_failures_->Add({{"reason", reason}}).Increment(); }
void Metrics::quota_refused() { quota_refusals_->Increment(); }
void Metrics::protocol_error() { protocol_errors_->Increment(); }
void Metrics::client_connected() { clients_->Increment(); }
void Metrics::client_gone() { clients_->Decrement(); }
void Metrics::memory_in_use(std::uint64_t bytes) { memory_->Set(static_cast<double>(bytes)); }
void Metrics::pool_bytes(std::uint64_t bytes) { pool_->Set(static_cast<double>(bytes)); }
void Metrics::ucx_endpoints(std::size_t open, std::size_t closing, std::size_t held, std::size_t workers) {
  ucx_workers_->Set(static_cast<double>(workers));
  ucx_endpoints_->Add({{"state", "open"}}).Set(static_cast<double>(open));
  ucx_endpoints_->Add({{"state", "closing"}}).Set(static_cast<double>(closing));
  ucx_endpoints_->Add({{"state", "held"}}).Set(static_cast<double>(held));
}
void Metrics::heap_trims(std::uint64_t total) {
  if (total > heap_trims_counted_) heap_trims_->Increment(static_cast<double>(total - heap_trims_counted_));
  heap_trims_counted_ = total;
}
void Metrics::nvml_available(bool available) { nvml_available_->Set(available ? 1 : 0); }

void Metrics::gpu(unsigned index, const std::string& model, std::optional<double> utilization,
                  std::optional<double> memory_used_bytes, std::optional<double> memory_total_bytes,
                  std::optional<double> temperature_celsius) {
  // Bounded: one series per GPU of this host.
  const prometheus::Labels labels{{"gpu", std::to_string(index)}, {"model", model}};
  if (utilization) gpu_utilization_->Add(labels).Set(*utilization);
  if (memory_used_bytes) gpu_memory_used_->Add(labels).Set(*memory_used_bytes);
  if (memory_total_bytes) gpu_memory_total_->Add(labels).Set(*memory_total_bytes);
  if (temperature_celsius) gpu_temperature_->Add(labels).Set(*temperature_celsius);
}

void Metrics::queue_depth(const std::string& device, std::size_t tasks) {
  queue_depth_->Add({{"device", device}}).Set(static_cast<double>(tasks));
}

void Metrics::gpu_copies(const std::string& device, std::uint64_t to_device, std::uint64_t from_device) {
  gpu_copy_bytes_->Add({{"device", device}, {"direction", "to_device"}}).Set(static_cast<double>(to_device));
  gpu_copy_bytes_->Add({{"device", device}, {"direction", "from_device"}}).Set(static_cast<double>(from_device));
}
void Metrics::device_up(const std::string& device, bool up) { device_up_->Add({{"device", device}}).Set(up ? 1 : 0); }

}  // namespace ferry::ferryd
