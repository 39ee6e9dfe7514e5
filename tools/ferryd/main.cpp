// ferryd: serves Ferry runtimes on CPU-only machines with this host's
// workers and GPUs. Options are in options.cpp, the protocol
// per client in session*.cpp; this file starts and stops the pieces.
#include <fmt/format.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/units.hpp"
#include "ferry/transport/worker.hpp"
#include "metrics.hpp"
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
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0)
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
  // Sessions send replicas from their host memory without asking the
  // runtime: what a GPU task wrote must be there as soon as it is done.
  runtime_options.gpu_write_through = true;
  // A kernel shorter than a thread hand-off runs on the progress thread,
  // which then answers its run at once (docs/architecture.md, hand-offs).
  runtime_options.inline_below_seconds = 20e-6;
  Runtime runtime(runtime_options);
  for (const auto& plugin : options.plugins) {
    try {
      runtime.load_plugin(plugin);
    } catch (const Error& e) {
      std::fprintf(stderr, "ferryd: --plugin: %s\n", e.what());
      return usage_exit;
    }
  }

  Metrics metrics;
  if (options.metrics_host) {
    const auto port = metrics.expose(*options.metrics_host, options.metrics_port);
    log().info("ferryd metrics on http://{}:{}/metrics", *options.metrics_host, port);
  }

  unsigned cpu_workers = 0;
  std::vector<std::string> gpu_names;
  for (const auto& device : runtime.devices()) {
    if (device.kind == DeviceKind::cpu) cpu_workers += device.lanes;
    if (device.kind == DeviceKind::cuda) gpu_names.push_back(device.name);
  }

  ServerState state{transport::Worker::create({"ferryd"}), runtime, metrics, options.token,
                    fmt::format("ferryd {}", config::version), cpu_workers,
                    Limits{options.client_quota, options.memory_limit}};
  state.limits.handshake_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(options.handshake_timeout * 1000.0));
  state.gpus = static_cast<std::uint32_t>(gpu_names.size());
  {
    Server server(state);
    const std::uint16_t port = server.listen(options.listen_host, options.listen_port);
    if (!options.port_file.empty()) write_port_file(options.port_file, port);
    log().info("ferryd listening on {}:{} (transports: {})", options.listen_host, port, state.worker->transports());
    log().info("{} CPU workers; client quota {}, memory limit {}, payloads up to {}", cpu_workers,
               format_bytes(options.client_quota), format_bytes(options.memory_limit),
               format_bytes(state.limits.max_payload));
    log().info("{} GPUs{}{}", gpu_names.size(), gpu_names.empty() ? "" : ": ", fmt::join(gpu_names, ", "));

    const int signo = wait_for_stop_signal(signal_fd);
    log().info("ferryd: {} received, shutting down", strsignal(signo));
    const std::size_t clients = server.shut_down("ferryd is shutting down");
    try {
      runtime.wait();  // tasks already answered with shutting_down still finish before their buffers go
    } catch (const Error&) {
      // Each failure was reported to its client.
    }
    log().info("ferryd stopped: {} clients told, every task drained", clients);
  }
  state.worker.reset();
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // A restarted ferryd must be able to listen on its old port at once, while
  // the connections of the one before linger in TIME_WAIT; a setting the
  // operator made explicitly wins.
  ::setenv("UCX_TCP_CM_REUSEADDR", "y", /*overwrite=*/0);
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
  try {
    return serve(options, signal_fd);
  } catch (const std::exception& e) {
    log().error("ferryd: {}", e.what());
    return EXIT_FAILURE;
  }
}
