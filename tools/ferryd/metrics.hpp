// ferryd's Prometheus metrics. The metrics always exist (updating one is a
// relaxed atomic add after a short lock that finds its series); only with
// --metrics does the HTTP port (metrics_http.hpp) serve them, with /healthz
// and /readyz beside them.
//
// Labels are bounded: kernels by ferryd's own list (a kernel a client
// defined from source counts as "client_defined"); clients by who they are
// to the fair share: a keyed client by its key's name (the operator's
// choice, one series per key however many names its connections give), a
// token client by "token:" and the host it names, at most
// max_client_labels such hosts (then "token:other"). A client choosing
// names can neither grow the series nor take another client's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/labels.h>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace ferry::ferryd {

class MetricsHttp;

class Metrics {
 public:
  static constexpr std::size_t max_client_labels = 32;
  enum class Direction { in, out };  // to ferryd (put) or from it (get)

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics, /healthz and /readyz on host:port (port 0: any free
  // port); returns the port. Throws ferry::Error naming the address.
  std::uint16_t serve(const std::string& host, std::uint16_t port);
  // Closes the HTTP port, so that a ferryd started next can take it at once.
  void stop_serving();
  // /readyz answers 200 only while ready (listening, not shutting down).
  void set_ready(bool ready) noexcept { ready_.store(ready, std::memory_order_relaxed); }
  // Asked at each probe: why this host cannot serve what it was started
  // for (every GPU down), empty while it can. Not empty: /readyz and
  // /healthz answer 503 with it. Set before serve().
  void on_health(std::function<std::string()> unusable) { unusable_ = std::move(unusable); }
  // Run before each scrape, for gauges read from elsewhere (queue depths).
  void on_scrape(std::function<void(Metrics&)> refresh) { refresh_ = std::move(refresh); }

  // What this ferryd is and may do, as constant gauges.
  void describe_server(const std::string& version, const std::vector<std::string>& kernels);
  void limits(std::uint64_t client_quota, std::uint64_t memory_limit, std::uint64_t max_payload,
              double handshake_timeout_seconds, unsigned cpu_workers, unsigned gpus);

  // `client`: the session's fair-share name (a key's name, or "token:" and
  // the name a token client gave, "host:pid").
  void task_done(const std::string& kernel, const std::string& client, double seconds, bool ok);
  // A fair-share client's runs waiting for a lane, and one more started.
  void client_queue(const std::string& client, std::size_t queued, bool started);
  void bytes_in(std::uint64_t bytes, const std::string& client);
  void bytes_out(std::uint64_t bytes, const std::string& client);
  void transfer(Direction direction, std::uint64_t bytes, double seconds);
  // reason: wrong_token, handshake_timeout, version_mismatch
  void auth_failure(const std::string& reason);
  void quota_refused();
  void protocol_error();
  void client_connected();
  void client_gone();
  void memory_in_use(std::uint64_t bytes);
  // What the host pool has mapped (SlabPool::Stats::slab_bytes): it grows to
  // the replicas' high-water mark in whole slabs and keeps them, so a
  // ferryd's RSS steps with it and otherwise stays flat.
  void pool_bytes(std::uint64_t bytes);
  // The heap trims this process has done (HeapTrim::trims), at scrape time.
  void heap_trims(std::uint64_t total);
  // The server worker's UCX endpoints and UCX workers (Worker::endpoints), at scrape time.
  void ucx_endpoints(std::size_t open, std::size_t closing, std::size_t held, std::size_t workers);
  void queue_depth(const std::string& device, std::size_t tasks);
  // Bytes a GPU of the runtime copied in and out since ferryd started (its
  // DeviceInfo): results stay on the GPU, so bytes out grow with what
  // clients read back, not with the tasks run.
  void gpu_copies(const std::string& device, std::uint64_t to_device, std::uint64_t from_device);
  // 0 once the device takes no more tasks (a GPU after a sticky CUDA error).
  void device_up(const std::string& device, bool up);
  // NVML (nvml_gauges.hpp): whether it answered, and one GPU's reading.
  // Without NVML there are no ferry_gpu_* series at all, rather than zeros
  // that would read as idle, cool GPUs.
  void nvml_available(bool available);
  void gpu(unsigned index, const std::string& model, std::optional<double> utilization,
           std::optional<double> memory_used_bytes, std::optional<double> memory_total_bytes,
           std::optional<double> temperature_celsius);

  // The text a scrape gets (also what tests read without HTTP).
  std::string scrape();

 private:
  // A client's series and a kernel's, found once per label value: building
  // a label set and looking it up in its family (prometheus::Family::Add)
  // cost ferryd more per chained task than running the task.
  // A client's series in each family is made when that family first
  // counts something for it, never beside another's: a client that only
  // shipped data has no ferry_client_tasks_total{client=...} 0 (a zero
  // series reads on a dashboard as a tenant that ran nothing, or as a
  // second tenant of the same name).
  struct ClientSeries {
    prometheus::Labels labels;
    prometheus::Counter* tasks = nullptr;
    prometheus::Gauge* queued = nullptr;
    prometheus::Counter* started = nullptr;
    prometheus::Counter* bytes_in = nullptr;
    prometheus::Counter* bytes_out = nullptr;
  };
  struct KernelSeries {
    prometheus::Counter* ok;
    prometheus::Counter* failed;
    prometheus::Histogram* seconds;
  };
  ClientSeries& client_series(const std::string& client);  // under series_mutex_
  // `client`'s series in `family`, made on first use.
  template <class T>
  T& client_metric(const std::string& client, T* ClientSeries::*member, prometheus::Family<T>* family);
  KernelSeries& kernel_series(const std::string& kernel);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* tasks_;
  prometheus::Counter* bytes_in_;
  prometheus::Counter* bytes_out_;
  prometheus::Counter* protocol_errors_;
  prometheus::Gauge* clients_;
  prometheus::Gauge* memory_;
  prometheus::Gauge* pool_;
  prometheus::Counter* heap_trims_;
  std::uint64_t heap_trims_counted_ = 0;  // under scrape_mutex_ (refresh)
  prometheus::Family<prometheus::Counter>* kernel_tasks_;
  prometheus::Family<prometheus::Histogram>* task_seconds_;
  prometheus::Family<prometheus::Counter>* client_tasks_;
  prometheus::Family<prometheus::Gauge>* client_queued_;
  prometheus::Family<prometheus::Counter>* client_started_;
  prometheus::Family<prometheus::Counter>* client_bytes_in_;
  prometheus::Family<prometheus::Counter>* client_bytes_out_;
  prometheus::Family<prometheus::Histogram>* transfer_bytes_;
  prometheus::Family<prometheus::Histogram>* transfer_seconds_;
  prometheus::Family<prometheus::Counter>* auth_failures_;
  prometheus::Counter* quota_refusals_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* ucx_endpoints_;
  prometheus::Gauge* ucx_workers_;
  prometheus::Family<prometheus::Gauge>* gpu_copy_bytes_;
  prometheus::Family<prometheus::Gauge>* device_up_;
  prometheus::Family<prometheus::Gauge>* limits_;
  prometheus::Family<prometheus::Gauge>* build_info_;
  prometheus::Gauge* nvml_available_;
  prometheus::Family<prometheus::Gauge>* gpu_utilization_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_used_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_total_;
  prometheus::Family<prometheus::Gauge>* gpu_temperature_;

  std::set<std::string, std::less<>> kernels_;  // set once, before any client
  std::mutex series_mutex_;
  // By client label and by kernel name: both bounded, and their elements
  // never move. token_labels_: how many of the client labels are token hosts.
  std::map<std::string, ClientSeries, std::less<>> client_series_;
  std::map<std::string, KernelSeries, std::less<>> kernels_series_;
  std::size_t token_labels_ = 0;
  std::atomic<bool> ready_{false};
  std::function<void(Metrics&)> refresh_;
  std::function<std::string()> unusable_;
  std::mutex scrape_mutex_;  // refresh and collect as one, whichever HTTP thread asks
  std::unique_ptr<MetricsHttp> http_;
};

}  // namespace ferry::ferryd
