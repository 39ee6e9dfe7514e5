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
  // The runtime's other variables (workers, trace, remotes...) have no say
  // in a check; the ones that decide whom to trust are read by the
  // runtime's own code, so the check cannot trust a host that a program
  // would refuse (and pin it for that program).
  o.read_environment = false;
  o.workers = 1;
  o.gpus = "none";
  o.persist_perf_models = false;
  o.remotes = {options.address};
  o.remote_policy = RemotePolicy::require;
  o.remote_timeout = options.timeout;
  try {
    Runtime::read_link_environment(o);
  } catch (const Error& e) {
    fmt::print(stderr, "ferry check: {}\n", e.what());
    return EXIT_FAILURE;
  }
  // The command line wins over the environment. A token given there is
  // what signs in, even with FERRY_IDENTITY set (which would win in the
  // runtime), unless --identity is given too.
  if (!options.token.empty() || !options.token_file.empty()) {
    o.token = options.token;
    o.token_file = options.token_file;
    o.identity.clear();
  }
  if (!options.identity.empty()) o.identity = options.identity;
  if (options.strict) o.strict_host_keys = true;
  try {
    Runtime rt(o);
    const auto s = rt.remote_stats(options.address);
    fmt::print("{}: usable\n", options.address);
    fmt::print("  server:   {} (protocol {}); this client: ferry {}\n", s.server, protocol::version, config::version);
    fmt::print("  link:     {:.0f} µs one way, {}/s (measured now)\n", s.latency_seconds * 1e6,
               format_bytes(static_cast<std::size_t>(s.bytes_per_second)));
    fmt::print("  cipher:   {}\n", s.cipher.empty() ? "(not reported)" : s.cipher);
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
