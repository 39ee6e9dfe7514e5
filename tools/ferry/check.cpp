#include "check.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "ferry/config.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/units.hpp"

namespace ferry::tools {

int run_check(const CheckOptions& options) {
  Runtime::Options o;
  o.read_environment = false;  // only the credentials come from the environment, below
  o.workers = 1;
  o.gpus = "none";
  o.persist_perf_models = false;
  o.remotes = {options.address};
  o.remote_policy = RemotePolicy::require;
  o.remote_timeout = options.timeout;
  o.token = options.token;
  o.token_file = options.token_file;
  if (o.token.empty() && o.token_file.empty()) {
    if (const char* t = std::getenv("FERRY_TOKEN")) o.token = t;
    else if (const char* f = std::getenv("FERRY_TOKEN_FILE")) o.token_file = f;
  }
  // Signing in with a key, as the runtime would (ferry keygen).
  if (const char* identity = std::getenv("FERRY_IDENTITY")) o.identity = identity;
  if (const char* pins = std::getenv("FERRY_KNOWN_HOSTS")) o.known_hosts = pins;
  try {
    Runtime rt(o);
    const auto s = rt.remote_stats(options.address);
    fmt::print("{}: usable\n", options.address);
    fmt::print("  server:   {} (protocol {}); this client: ferry {}\n", s.server, protocol::version, config::version);
    fmt::print("  link:     {:.0f} µs one way, {}/s (measured now)\n", s.latency_seconds * 1e6,
               format_bytes(static_cast<std::size_t>(s.bytes_per_second)));
    fmt::print("  quota:    {} for this client\n", format_bytes(s.quota));
    fmt::print("  devices:  {}\n", s.server_devices.empty() ? "(not reported)" : fmt::format("{}", fmt::join(s.server_devices, "; ")));
    fmt::print("  kernels:  {}\n", s.kernels.empty() ? "(not reported)"
                                                     : fmt::format("{} — {}", s.kernels.size(), fmt::join(s.kernels, ", ")));
    return EXIT_SUCCESS;
  } catch (const Error& e) {
    fmt::print(stderr, "ferry check: {}\n", e.what());
    return EXIT_FAILURE;
  }
}

}  // namespace ferry::tools
