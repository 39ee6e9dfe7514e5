// A host-to-host edge against a direct ship, side by side in one run: a
// task on ferryd A writes --mib MiB, a task on ferryd B reads it, and B
// pulls it from A directly (host-to-host); beside it, the same bytes
// shipped from this client to B. Target: the edge moves at >= 90 % of the
// ship's rate. Also the same edge through the client (FERRY_HOST_TO_HOST=0:
// fetch from A, then ship to B), for reference. Times are the trace's
// transfer spans (the move alone, not the kernels).
//   ferry_bench_h2h --a=HOST:PORT --b=HOST:PORT --token-file=F [--mib=256] [--reps=3] [--out=bench-h2h.json]
// Run by bench/run_transfer_bench.sh BUILD_DIR --only=h2h, which starts both ferryd.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ferry/ferry.hpp>
#include <ferry/runtime/trace.hpp>

#include "args.hpp"
#include "machine.hpp"

namespace {

constexpr double mib = 1024.0 * 1024.0;

struct Config {
  std::string a, b, token_file, out = "bench-h2h.json";
  std::size_t mib_size = 256;
  int reps = 3;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* key) { return ferry::bench::option(arg, key); };
    if (auto v = value("--a=")) c.a = *v;
    else if (auto v = value("--b=")) c.b = *v;
    else if (auto v = value("--token-file=")) c.token_file = *v;
    else if (auto v = value("--out=")) c.out = *v;
    else if (auto v = value("--mib=")) c.mib_size = std::stoul(*v);
    else if (auto v = value("--reps=")) c.reps = std::max(1, std::stoi(*v));
    else throw std::invalid_argument("unknown argument " + arg + " (see the top of h2h_bench.cpp)");
  }
  if (c.a.empty() || c.b.empty() || c.token_file.empty())
    throw std::invalid_argument("--a, --b and --token-file are required");
  return c;
}

ferry::Runtime::Options options(const Config& c, bool host_to_host) {
  ferry::Runtime::Options o;
  o.read_environment = false;
  o.persist_perf_models = false;
  o.auto_chunk = false;  // one task moves the whole buffer: the spans are the transfers
  o.remotes = {c.a, c.b};
  o.token_file = c.token_file;
  o.host_to_host = host_to_host;
  o.trace = true;
  return o;
}

// Seconds of the newest transfer span of `bytes` whose `what` starts with `what`.
double last_span(const ferry::Runtime& rt, const std::string& what, std::size_t bytes) {
  double seconds = -1;
  for (const auto& span : rt.trace()->transfers())
    if (span.what.starts_with(what) && span.bytes == bytes) seconds = static_cast<double>(span.end_ns - span.start_ns) * 1e-9;
  if (seconds < 0) throw std::runtime_error(fmt::format("no '{}' span of {} bytes in the trace", what, bytes));
  return seconds;
}

struct Best {
  double edge = 1e300;     // host-to-host A -> B (or, switched off, fetch A -> client + ship client -> B)
  double ship = 1e300;     // client -> B, direct
  std::size_t through_client = 0;  // bytes of the edge that passed through the client
};

Best measure(const Config& c, bool host_to_host) {
  ferry::Runtime rt(options(c, host_to_host));
  const std::size_t bytes = c.mib_size << 20, n = bytes / sizeof(double);
  const auto on_a = ferry::on(ferry::remote(c.a)), on_b = ferry::on(ferry::remote(c.b));
  Best best;
  for (int r = 0; r <= c.reps; ++r) {  // round 0 warms up (first replicas, rendezvous set-up)
    const auto a0 = rt.remote_stats(c.a), b0 = rt.remote_stats(c.b);
    auto x = rt.buffer<double>(n);
    rt.submit("fill", ferry::write(x), 1.0, on_a).wait();  // produced on A: its only copy
    rt.submit("nrm2", ferry::read(x), on_b).wait();        // consumed on B
    const auto a1 = rt.remote_stats(c.a), b1 = rt.remote_stats(c.b);
    const double edge = host_to_host ? last_span(rt, "host-to-host", bytes)
                                     : last_span(rt, "fetch", bytes) + last_span(rt, "ship", bytes);
    auto y = rt.buffer<double>(n);
    std::ranges::fill(y.host(), 1.0);
    rt.submit("nrm2", ferry::read(y), on_b).wait();  // the peer: a direct client -> B ship
    const double ship = last_span(rt, "ship", bytes);
    if (r == 0) continue;
    best.edge = std::min(best.edge, edge);
    best.ship = std::min(best.ship, ship);
    best.through_client += (a1.bytes_fetched - a0.bytes_fetched) + (b1.bytes_shipped - b0.bytes_shipped);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  const double size = static_cast<double>(c.mib_size);
  const Best direct = measure(c, true);
  const Best via_client = measure(c, false);
  const double edge_rate = size / direct.edge, ship_rate = size / direct.ship;
  const double ratio = edge_rate / ship_rate;
  std::printf("%zu MiB edge A -> B, best of %d: host-to-host %.0f MiB/s (%.1f ms), bytes through the client %zu\n",
              c.mib_size, c.reps, edge_rate, direct.edge * 1e3, direct.through_client);
  std::printf("peer, same run: direct client -> B ship %.0f MiB/s (%.1f ms)\n", ship_rate, direct.ship * 1e3);
  std::printf("host-to-host / direct ship: %.2f (target >= 0.90)\n", ratio);
  std::printf("for reference, the edge through the client (FERRY_HOST_TO_HOST=0): %.0f MiB/s (%.1f ms; ship beside it %.0f MiB/s)\n",
              size / via_client.edge, via_client.edge * 1e3, size / via_client.ship);
  nlohmann::json out = {
      {"context", {{"machine", ferry::bench::machine()}, {"git_revision", FERRY_GIT_REVISION}}},
      {"mib", c.mib_size},
      {"reps", c.reps},
      {"host_to_host_seconds", direct.edge},
      {"direct_ship_seconds", direct.ship},
      {"ratio", ratio},
      {"bytes_through_client", direct.through_client},
      {"through_client_seconds", via_client.edge},
      {"through_client_ship_seconds", via_client.ship},
  };
  std::ofstream(c.out) << out.dump(2) << '\n';
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ferry_bench_h2h: %s\n", e.what());
  return 1;
}
