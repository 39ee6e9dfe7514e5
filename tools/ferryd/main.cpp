// ferryd: serves Ferry runtimes on CPU-only machines with this host's
// workers and GPUs. Options are in options.cpp, the protocol
// per client in session*.cpp; this file starts and stops the pieces.
#include <fmt/format.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/heap_trim.hpp"
#include "ferry/log.hpp"
#include "ferry/allocator/slab_pool.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/units.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/worker.hpp"
#include "authorized_keys.hpp"
#include "metrics.hpp"
#include "nvml_gauges.hpp"
#include "options.hpp"
#include "server.hpp"
#include "server_state.hpp"

namespace {

using namespace ferry;
using namespace ferry::ferryd;

int stop_pipe[2] = {-1, -1};

// Only hands the signal number to the main thread: nothing else is safe in a handler.
extern "C" void on_stop_signal(int signo) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t n = write(stop_pipe[1], &byte, 1);
  errno = saved;
}

// A self-pipe rather than a signalfd: libraries start threads before main
// (OpenBLAS's pool does), so no mask set here could cover every thread, and
// a signal delivered to one of those would kill the process.
int install_stop_signals() {
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) throw_system_error("pipe2", errno);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  // SIGHUP comes the same way: it rereads --authorized-keys and reopens --audit-log.
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0 ||
      sigaction(SIGHUP, &action, nullptr) != 0)
    throw_system_error("sigaction", errno);
  // A client or a scraper that hangs up mid-write must not kill the server.
  signal(SIGPIPE, SIG_IGN);
  return stop_pipe[0];
}

int wait_for_stop_signal(int fd) {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = read(fd, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno != EINTR) throw_system_error("read(stop pipe)", errno);
  }
}

// The next stop signal, or nothing once `seconds` have passed.
std::optional<int> wait_for_stop_signal(int fd, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd readable{fd, POLLIN, 0};
    const int n = ::poll(&readable, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (n < 0 && errno != EINTR) throw_system_error("poll(stop pipe)", errno);
    if (n > 0) return wait_for_stop_signal(fd);
  }
}

// The main thread waits for the next stop signal a second at a time, and
// between them gives the heap's free pages back once ended sessions have
// been quiet (HeapTrim; each session's end is a burst, Server::accept).
int wait_for_stop_signal_trimming(int fd) {
  for (;;) {
    if (const auto signo = wait_for_stop_signal(fd, 1.0)) return *signo;
    HeapTrim::global().tick();
  }
}

// --drain-seconds: /readyz answers 503 first, so that a Service or load
// balancer takes this host out before its clients are told to go; the
// clients already here are served meanwhile. SIGHUP does not end it.
void drain(Metrics& metrics, int signal_fd, double seconds) {
  metrics.set_ready(false);
  log().info("draining: /readyz answers 503 for {:g} s while clients are still served (SIGTERM again: stop now)",
             seconds);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const double left = std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    const auto signo = wait_for_stop_signal(signal_fd, left);
    if (!signo) return;
    if (*signo != SIGHUP) {
      log().info("ferryd: {} received while draining, stopping now", strsignal(*signo));
      return;
    }
  }
}

// Written whole, then renamed into place, so a reader never sees half a number.
void write_port_file(const std::filesystem::path& path, std::uint16_t port) {
  const auto partial = std::filesystem::path(path.string() + ".partial");
  {
    std::ofstream out(partial, std::ios::trunc);
    out << port << '\n';
    if (!out) throw Error(fmt::format("cannot write the port file {}", partial.string()));
  }
  std::filesystem::rename(partial, path);
}

// GPUs the command line asked for: a GPU it was promised and cannot see is
// a configuration error (exit 2), found before anything starts.
void check_gpus(const Options& options) {
  if (options.gpus.empty()) return;
  const int count = cuda::device_count();
  if (options.gpus.front() < 0) {
    if (count == 0) log().info("--gpus all: this host has none ({}); tasks run on the CPU workers",
                               cuda::unavailable_reason());
    return;
  }
  for (int ordinal : options.gpus) {
    if (count == 0)
      throw UsageError(fmt::format("--gpus asks for GPU {}, but this host has none: {}", ordinal,
                                   cuda::unavailable_reason()));
    if (ordinal >= count)
      throw UsageError(fmt::format("--gpus asks for GPU {}, but this host has {} (0-{})", ordinal, count, count - 1));
  }
}

constexpr int usage_exit = 2;

// UCX's TCP transport listens on every interface it uses; a ferryd told to
// listen on one address keeps UCX on that address's interface too
// (UCX_NET_DEVICES), unless the operator chose devices already.
void keep_ucx_on(const std::string& host) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr) return;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return;
  std::string wanted;
  char text[INET6_ADDRSTRLEN] = {};
  for (auto* a = list; a != nullptr && wanted.empty(); a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      if (in->sin_addr.s_addr == htonl(INADDR_ANY)) break;
      wanted = inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) break;
      wanted = inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    }
  }
  freeaddrinfo(list);
  if (wanted.empty()) return;  // every interface: UCX may use them all
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return;
  std::string device;
  for (auto* i = interfaces; i != nullptr && device.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const void* raw = family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
                                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    char here[INET6_ADDRSTRLEN] = {};
    if (inet_ntop(family, raw, here, sizeof here) != nullptr && wanted == here) device = i->ifa_name;
  }
  freeifaddrs(interfaces);
  if (device.empty()) return;
  ::setenv("UCX_NET_DEVICES", device.c_str(), 0);
  log().info("UCX kept on interface {} (the --listen address's; set UCX_NET_DEVICES to choose)", device);
}

// FILE.pub beside --host-key FILE: the public half, so that an operator can
// pin this server before any client meets it (strict host keys): a
// known_hosts line is "HOST:PORT " followed by this file's line, whose last
// word (ferryd@host) known_hosts ignores. Mode 644: it is no secret. One
// that holds this key is left as it is; one that holds another key (the
// private key replaced by hand) would have operators pin a key this server
// cannot prove, so ferryd stops, naming both, rather than replace it
// behind their back.
void write_public_key(const std::filesystem::path& path, const transport::KeyPair& key) {
  const auto public_path = std::filesystem::path(path.string() + ".pub");
  if (std::filesystem::exists(public_path)) {
    std::string line;
    std::getline(std::ifstream(public_path), line);
    std::optional<transport::PublicKey> there;
    try {
      there = transport::parse_public_key(line);
    } catch (const UsageError&) {
      // not a key line: treated as another key, below
    }
    if (there == key.public_key()) return;
    throw UsageError(fmt::format("{} holds {}, not the public half of --host-key {} ({}): remove it (ferryd writes "
                                 "the right one) once you know why they differ; clients may have pinned either",
                                 public_path.string(), there ? transport::fingerprint(*there) : "no key",
                                 path.string(), transport::fingerprint(key.public_key())));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string line = transport::public_key_line(key.public_key(), fmt::format("ferryd@{}", host)) + "\n";
  // A folder ferryd may read but not write (a key installed by root) is
  // no reason to stop serving: the line goes to the log instead.
  const auto unwritable = [&](int error) {
    log().warn("cannot write {}: {}; host key's public line: {}", public_path.string(), std::strerror(error),
               line.substr(0, line.size() - 1));
  };
  const int fd = ::open(public_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return unwritable(errno);
  // Mode 644 whatever the umask: the point of the file is to be read.
  ::fchmod(fd, 0644);
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int error = errno;
  ::close(fd);
  if (!ok) {
    std::filesystem::remove(public_path);
    return unwritable(error);
  }
  log().info("host key's public line written to {} (known_hosts: \"HOST:PORT\" then that line)", public_path.string());
}

// --host-key: read, or made there on first start so that it stays the same
// across restarts; none given: a fresh one, which clients cannot pin for long.
std::optional<transport::KeyPair> load_host_key(const std::filesystem::path& path) {
  if (path.empty()) {
    log().info("no --host-key: this run's host key is new; clients that pin it will refuse the next run");
    return std::nullopt;
  }
  if (!std::filesystem::exists(path)) {
    transport::KeyPair::generate().write(path);
    log().info("host key {} created", path.string());
  }
  auto key = transport::KeyPair::read(path);
  write_public_key(path, key);
  return key;
}

// The CPU's model name, as /proc/cpuinfo gives it.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name"))
      if (const auto colon = line.find(':'); colon != std::string::npos && colon + 2 <= line.size())
        return line.substr(colon + 2);
  return "cpu";
}

// What welcome tells every client: the kernels it may run here (so its
// scheduler never sends one this host lacks) and the devices, for people.
void describe_offer(const Runtime& runtime, ServerState& state) {
  state.kernels = runtime.kernel_names();
  std::sort(state.kernels.begin(), state.kernels.end());
  for (const auto& device : runtime.devices()) {
    const bool cpu = device.kind == DeviceKind::cpu;
    state.devices.push_back({device.name, cpu ? fmt::format("cpu ({})", plural(device.lanes, "worker")) : device.description,
                             cpu ? fmt::format("{} x{}", cpu_model(), device.lanes) : device.perf_key, device.peak});
  }
  try {
    protocol::Welcome welcome{.server = state.name};
    welcome.kernels = state.kernels;
    offer_devices(state, welcome);
    (void)protocol::encode(welcome);
  } catch (const ProtocolError& e) {
    // Too many to list: clients then assume the kernels they know, as before the list existed.
    log().warn("ferryd: the list of {} kernels does not fit in a welcome ({}); clients are not told which kernels "
               "this host has",
               state.kernels.size(), e.what());
    state.kernels.clear();
  }
}

// --gpus as Runtime::Options::gpus spells it.
std::string gpu_spec(const std::vector<int>& gpus) {
  if (gpus.empty()) return "none";
  if (gpus.front() < 0) return "all";
  return fmt::format("{}", fmt::join(gpus, ","));
}

int serve(const Options& options, int signal_fd) {
  Runtime::Options runtime_options;
  runtime_options.workers = options.workers;
  runtime_options.persist_perf_models = false;
  runtime_options.read_environment = false;
  runtime_options.gpus = gpu_spec(options.gpus);
  runtime_options.gpu_memory_limit = options.gpu_memory;
  // A kernel shorter than a thread hand-off runs on the progress thread,
  // which then answers its run at once (docs/architecture.md, hand-offs).
  runtime_options.inline_below_seconds = 20e-6;
  Runtime runtime(runtime_options);
  const auto builtin = runtime.kernel_names();
  for (const auto& plugin : options.plugins) {
    try {
      runtime.load_plugin(plugin);
    } catch (const Error& e) {
      std::fprintf(stderr, "ferryd: --plugin: %s\n", e.what());
      return usage_exit;
    }
  }

  // GPU gauges wherever the driver's NVML answers, whatever --gpus says:
  // an operator watches the machine's GPUs, busy with this ferryd or not.
  // Declared first: the metrics port's scrapes read it until it closes.
  NvmlGauges nvml;
  Metrics metrics;

  unsigned cpu_workers = 0, gpu_lanes = 0;
  std::vector<std::string> gpu_names;
  std::vector<int> gpu_ordinals;
  for (const auto& device : runtime.devices()) {
    if (device.kind == DeviceKind::cpu) cpu_workers += device.lanes;
    if (device.kind == DeviceKind::cuda) {
      gpu_names.push_back(device.name);
      gpu_ordinals.push_back(device.gpu);
      gpu_lanes += device.lanes;
    }
  }

  transport::Worker::Options worker_options{"ferryd"};
  worker_options.poll_after_activity = std::chrono::microseconds(options.poll_us);
  worker_options.sessions_per_generation = options.ucx_worker_sessions;
  ServerState state{transport::Worker::create(worker_options), runtime, metrics,
                    fmt::format("ferryd {}", config::version), cpu_workers,
                    Limits{options.client_quota, options.memory_limit}};
  // Clients' replicas live in the runtime's pool: registered once, ships land there and fetches leave from it.
  if (auto pool = std::dynamic_pointer_cast<SlabPool>(runtime.host_memory())) state.worker->register_slabs(pool);
  for (auto& name : runtime.kernel_names())
    if (std::find(builtin.begin(), builtin.end(), name) == builtin.end()) state.plugin_kernels.insert(name);
  state.limits.handshake_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(options.handshake_timeout * 1000.0));
  state.gpus = static_cast<std::uint32_t>(gpu_names.size());
  state.gpu_ordinals = std::move(gpu_ordinals);
  state.limits.compile_limit = std::chrono::milliseconds(static_cast<std::int64_t>(options.compile_limit * 1000.0));
  state.gpu_health = std::make_shared<GpuHealth>([&runtime] { return runtime.devices(); });
  // As many of the clients' runs in the runtime as it has lanes: the rest
  // wait in ferryd, where the fair share picks whose runs go next.
  state.fair = std::make_shared<FairShare>(cpu_workers, gpu_lanes,
                                           [&metrics](const std::string& client, std::size_t queued, bool started) {
                                             metrics.client_queue(client, queued, started);
                                           });
  std::optional<KeyRing> keys;
  if (!options.authorized_keys.empty()) keys.emplace(options.authorized_keys);
  if (!options.audit_log.empty()) state.audit->open(options.audit_log);
  describe_offer(runtime, state);
  metrics.describe_server(config::version, state.kernels.empty() ? runtime.kernel_names() : state.kernels);
  metrics.limits(options.client_quota, options.memory_limit, state.limits.max_payload, options.handshake_timeout,
                 cpu_workers, state.gpus);
  metrics.nvml_available(nvml.available());
  if (!nvml.available()) log().info("ferryd metrics: NVML unavailable ({}); no GPU gauges", nvml.unavailable_reason());
  metrics.on_scrape([&runtime, &nvml, health = state.gpu_health,
                     worker = std::weak_ptr<transport::Worker>(state.worker)](Metrics& m) {
    health->check();
    // Weak: the worker stops with the server state, before the metrics end.
    if (const auto w = worker.lock()) {
      const auto endpoints = w->endpoints();
      m.ucx_endpoints(endpoints.open, endpoints.closing, endpoints.held, endpoints.generations);
    }
    if (auto pool = std::dynamic_pointer_cast<SlabPool>(runtime.host_memory())) m.pool_bytes(pool->stats().slab_bytes);
    m.heap_trims(HeapTrim::global().trims());
    for (const auto& device : runtime.devices()) {
      m.queue_depth(device.name, device.queued);
      m.device_up(device.name, device.available);
      if (device.kind == DeviceKind::cuda) m.gpu_copies(device.name, device.bytes_in, device.bytes_out);
    }
    for (const auto& gpu : nvml.read())
      m.gpu(gpu.index, gpu.model, gpu.utilization, gpu.memory_used_bytes, gpu.memory_total_bytes,
            gpu.temperature_celsius);
  });
  metrics.on_health([health = state.gpu_health] {
    health->check();
    return health->unusable();
  });
  if (options.metrics_host) {
    const auto port = metrics.serve(*options.metrics_host, options.metrics_port);
    log().info("ferryd metrics on http://{}:{}/metrics (and /healthz, /readyz)", *options.metrics_host, port);
  }
  {
    Server server(state, keys ? &*keys : nullptr);
    transport::BootstrapServer::Options bootstrap;
    // Dialling out only: a front door on loopback, for local clients.
    bootstrap.host = options.listen_host.empty() ? "127.0.0.1" : options.listen_host;
    bootstrap.port = options.listen_port;
    bootstrap.token = options.token;
    bootstrap.host_key = load_host_key(options.host_key);
    bootstrap.allow_plaintext = options.plaintext;
    bootstrap.encrypt_loopback = options.encrypt_loopback;
    const std::string bootstrap_host = bootstrap.host;
    const std::uint16_t port = server.listen(std::move(bootstrap));
    state.fetches = std::make_shared<PeerFetches>(state.worker,
                                                  std::dynamic_pointer_cast<SlabPool>(runtime.host_memory()),
                                                  state.host_key, FetchSources::parse(options.fetch_from));
    if (!options.port_file.empty()) write_port_file(options.port_file, port);
    log().info("ferryd listening on {}:{} (transports: {})", bootstrap_host, port, state.worker->transports());
    for (const auto& [host, client_port] : options.connect) server.dial(host, client_port);
    log().info("host key {}{}; clients sign in with {}{}{}", transport::fingerprint(server.host_key()),
               options.host_key.empty() ? "" : fmt::format(" (public line in {}.pub)", options.host_key.string()),
               options.token.empty() ? "" : "the token",
               !options.token.empty() && keys ? " or " : "",
               keys ? fmt::format("the {} of {}", plural(keys->size(), "key"), options.authorized_keys.string()) : "");
    if (options.plaintext)
      log().warn("--plaintext: clients that ask (FERRY_PLAINTEXT) get unencrypted links; trusted networks only");
    log().info("{}; client quota {}, memory limit {}, payloads up to {}", plural(cpu_workers, "CPU worker"),
               format_bytes(options.client_quota), format_bytes(options.memory_limit),
               format_bytes(state.limits.max_payload));
    log().info("{}{}{}", plural(gpu_names.size(), "GPU"), gpu_names.empty() ? "" : ": ", fmt::join(gpu_names, ", "));
    metrics.set_ready(true);

    int signo = wait_for_stop_signal_trimming(signal_fd);
    // SIGHUP: logrotate moved the audit log, or the operator changed
    // --authorized-keys; anything else stops ferryd.
    for (; signo == SIGHUP; signo = wait_for_stop_signal_trimming(signal_fd)) {
      state.audit->reopen();
      if (!keys) {
        log().info("SIGHUP: audit log reopened; no --authorized-keys to reread");
        continue;
      }
      try {
        const auto reloaded = server.reload_keys();
        log().info("SIGHUP: {} reread: {}; {} ended, {} updated", options.authorized_keys.string(),
                   plural(keys->size(), "key"), plural(reloaded.ended, "session"), plural(reloaded.updated, "session"));
      } catch (const Error& e) {
        log().error("SIGHUP: {}; the keys stay as they were", e.what());
      }
    }
    log().info("ferryd: {} received, shutting down", strsignal(signo));
    if (options.drain_seconds > 0) drain(metrics, signal_fd, options.drain_seconds);
    // First, so a ferryd started right after this one can take the port.
    metrics.stop_serving();
    const std::size_t clients = server.shut_down("ferryd is shutting down");
    try {
      runtime.wait();  // tasks already answered with shutting_down still finish before their buffers go
    } catch (const Error&) {
      // Each failure was reported to its client.
    }
    log().info("ferryd stopped: {} clients told, every task drained", clients);
  }
  state.fetches.reset();  // fetches from other hosts still running fail and end
  state.worker.reset();
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  int signal_fd = -1;
  try {
    signal_fd = install_stop_signals();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferryd: %s\n", e.what());
    return EXIT_FAILURE;
  }
  const Parsed parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const Options& options = *parsed.options;
  try {
    check_gpus(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "ferryd: %s\n", e.what());
    return usage_exit;
  }
  keep_ucx_on(options.listen_host);
  try {
    return serve(options, signal_fd);
  } catch (const std::exception& e) {
    log().error("ferryd: {}", e.what());
    return EXIT_FAILURE;
  }
}
