#include "options.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "ferry/config.hpp"
#include "ferry/error.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/units.hpp"
#include "authorized_keys.hpp"
#include "fetch_sources.hpp"

namespace ferry::ferryd {
namespace {

constexpr int usage_exit = 2;

std::vector<int> parse_gpus(const std::string& text) {
  if (text == "all") return {-1};
  if (text == "none") return {};
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item(text.data() + start, comma - start);
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || ordinal < 0)
      throw UsageError(fmt::format("--gpus '{}': expected all, none or a list of GPU ordinals like 0,1", text));
    if (std::find(out.begin(), out.end(), ordinal) != out.end())
      throw UsageError(fmt::format("--gpus '{}': GPU {} is listed twice", text, ordinal));
    out.push_back(ordinal);
    start = comma + 1;
  }
  return out;
}

// Resolved here so that a mistyped host is a bad command line, not a failure to listen.
void check_host(const std::string& flag, const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0) throw UsageError(fmt::format("{} host '{}' does not resolve: {}", flag, host, gai_strerror(rc)));
  freeaddrinfo(list);
}

// Half the machine's memory: what ferryd offers when not told, leaving room for the rest of the host.
std::uint64_t default_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{16} << 30;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2;
}

}  // namespace

Parsed parse_options(int argc, char** argv) {
  CLI::App app{"ferryd: serves Ferry runtimes on CPU-only machines with this host's CPUs and GPUs"};
  app.set_version_flag("--version", config::version);

  std::string listen, gpus = "all", metrics, memory_limit, client_quota, gpu_memory;
  std::vector<std::string> connect;
  Options o;
  app.add_option("--listen", listen,
                 "address to accept clients on, HOST:PORT (port 0: any free port); required unless --connect is "
                 "given (then 127.0.0.1:0)");
  app.add_option("--connect", connect,
                 "dial a client runtime that listens (FERRY_LISTEN) at HOST:PORT and serve it, redialling when it "
                 "goes away: for a host that cannot accept connections (behind NAT); repeatable");
  app.add_option("--token-file", o.token_file, "file holding the pre-shared token clients authenticate with");
  app.add_option("--authorized-keys", o.authorized_keys,
                 "file of client keys (ferry keygen) that may sign in, one per line with a name and options; "
                 "reread on SIGHUP");
  app.add_option("--host-key", o.host_key,
                 "ferryd's private key (ferry keygen), which clients pin; created there when missing "
                 "(default: a new one each start)");
  app.add_flag("--plaintext", o.plaintext,
               "let clients that ask for it (FERRY_PLAINTEXT) have an unencrypted link: trusted fabrics only");
  app.add_flag("--encrypt-loopback", o.encrypt_loopback, "encrypt links to clients on this host too");
  app.add_option("--gpus", gpus, "GPUs to serve with: all, none or ordinals like 0,1")->capture_default_str();
  app.add_option("--gpu-memory", gpu_memory,
                 "bytes of each GPU for replicas (default: its free memory less a margin)");
  app.add_option("--plugin", o.plugins, "shared library of kernels to load (repeatable)");
  app.add_option("--metrics", metrics,
                 "serve Prometheus metrics, /healthz and /readyz on HOST:PORT (:PORT: on 127.0.0.1 only)");
  app.add_option("--memory-limit", memory_limit, "bytes all clients' replicas may take together (default: half the RAM)");
  app.add_option("--client-quota", client_quota, "bytes one client's replicas may take (default: the memory limit)");
  app.add_option("--workers", o.workers, "CPU worker threads (0: one per CPU this process may use: its affinity mask within its cgroup's CPU "
                 "limit)")->check(CLI::Range(0u, 4096u));
  app.add_option("--port-file", o.port_file, "write the port actually listened on to this file");
  app.add_option("--audit-log", o.audit_log,
                 "append a JSON line per connection, authentication, kernel definition, task, quota refusal and "
                 "disconnection to FILE (reopened on SIGHUP)");
  app.add_option("--fetch-from", o.fetch_from,
                 "hosts a client may have this ferryd fetch a replica from (host-to-host transfers): a comma-"
                 "separated list of any, loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), ADDRESS/BITS, "
                 "HOST or HOST:PORT")
      ->capture_default_str();
  app.add_option("--handshake-timeout", o.handshake_timeout, "seconds a client has to authenticate before it is dropped")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  app.add_option("--compile-limit", o.compile_limit,
                 "seconds NVRTC may take to compile a kernel a client defines from CUDA source; past it the "
                 "definition is refused (the compile finishes on its own thread, and a client may have at most 2 "
                 "running)")
      ->check(CLI::Range(0.001, 100.0))
      ->capture_default_str();
  app.add_option("--drain-seconds", o.drain_seconds,
                 "after SIGTERM, seconds /readyz answers 503 while clients are still served, so a load balancer "
                 "(a Kubernetes Service) stops sending new ones before ferryd tells the connected ones it is "
                 "going; a second SIGTERM or SIGINT ends the wait")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--poll-us", o.poll_us,
                 "microseconds to keep polling for the next message after activity before sleeping (0: sleep at "
                 "once; FERRY_UCX_POLL_US overrides)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--ucx-worker-sessions", o.ucx_worker_sessions,
                 "client sessions per UCX worker: then a new one takes the next sessions and the old one ends "
                 "with its last session, freeing what UCX keeps of every session until its worker ends (a "
                 "same-host client's shared-memory lane, an entry per client); 0: one UCX worker for ferryd's life")
      ->check(CLI::Range(0u, 1000000u))
      ->capture_default_str();

  // Every option can come from the environment as well (FERRYD_MEMORY_LIMIT
  // for --memory-limit; the command line wins), so that a deployment's
  // overlay changes one variable by name instead of repeating the whole
  // argument list, and removes one (key mode's token) without list indexes.
  for (CLI::Option* option : app.get_options()) {
    const auto& names = option->get_lnames();
    if (names.empty() || names.front() == "help" || names.front() == "version") continue;
    std::string variable = "FERRYD_" + names.front();
    std::transform(variable.begin(), variable.end(), variable.begin(),
                   [](unsigned char c) { return c == '-' ? '_' : static_cast<char>(std::toupper(c)); });
    option->envname(variable);
  }

  Parsed parsed;
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    parsed.exit_code = app.exit(e);
    return parsed;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    parsed.exit_code = usage_exit;
    return parsed;
  }

  try {
    if (listen.empty() && connect.empty()) throw UsageError("--listen HOST:PORT is required (or --connect HOST:PORT)");
    if (!listen.empty()) {
      std::tie(o.listen_host, o.listen_port) = transport::parse_address(listen);
      check_host("--listen", o.listen_host);
    }
    for (const std::string& address : connect) {
      auto [host, port] = transport::parse_address(address);
      if (port == 0) throw UsageError(fmt::format("--connect {}: the client's port is needed", address));
      check_host("--connect", host);
      o.connect.emplace_back(std::move(host), port);
    }
    o.gpus = parse_gpus(gpus);
    if (!metrics.empty()) {
      // ":9400" means loopback: metrics say who the clients are, so serving
      // them beyond this host is a choice (--metrics 0.0.0.0:9400).
      if (metrics.front() == ':') metrics = "127.0.0.1" + metrics;
      std::string host;
      std::tie(host, o.metrics_port) = transport::parse_address(metrics);
      check_host("--metrics", host);
      o.metrics_host = host;
    }
    o.memory_limit = memory_limit.empty() ? default_memory_limit() : parse_bytes(memory_limit);
    o.gpu_memory = gpu_memory.empty() ? 0 : parse_bytes(gpu_memory);
    if (!gpu_memory.empty() && o.gpu_memory == 0) throw UsageError("--gpu-memory must be more than 0 bytes");
    o.client_quota = client_quota.empty() ? o.memory_limit : parse_bytes(client_quota);
    if (o.memory_limit == 0 || o.client_quota == 0)
      throw UsageError("--memory-limit and --client-quota must be more than 0 bytes");
    if (o.token_file.empty() && o.authorized_keys.empty())
      throw UsageError("clients need a way in: give --token-file, --authorized-keys, or both");
    if (!o.token_file.empty()) o.token = transport::read_token_file(o.token_file);
    if (!o.authorized_keys.empty()) AuthorizedKeys::load(o.authorized_keys);  // a bad file is a bad command line
    FetchSources::parse(o.fetch_from);
  } catch (const Error& e) {
    std::fprintf(stderr, "ferryd: %s\nRun with --help for more information.\n", e.what());
    parsed.exit_code = usage_exit;
    return parsed;
  }
  parsed.options = std::move(o);
  return parsed;
}

}  // namespace ferry::ferryd
