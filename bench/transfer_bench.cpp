// bulk transfer to and from a remote reaches >= 95 % (>= 90 % on default UCX_TLS) of ucx_perftest's
// bandwidth (>= 4 MiB, same transport), and an empty remote task's round trip
// is <= 2x UCX's ping-pong round trip and, restated (issue 34), <= 2x UCX's
// blocking ping-pong (-E sleep) + 2x Ferry's local submit->wait of the same
// task (both printed); a 10,000-task chain pinned to the
// remote costs <= 3 us per task (beside the same chain on the local CPU); a
// runtime idling with a connected remote uses < 1 % of a core. Needs a ferryd; the peer's numbers come
// from ucx_perftest run by bench/run_transfer_bench.sh under the same UCX_TLS.
//   ferry_bench_transfer --remote=HOST:PORT --token-file=F [--tls=LABEL]
//     [--sizes=1,4,16,64,256] [--chunks=1,4,16,64] [--windows=1,2,4,8] [--sweep-mib=16,256]
//     [--reps=5] [--tasks=2000] [--chain=10000] [--idle-s=2] [--peer-bw=MIB:MBps,...] [--peer-lat-us=ONE_WAY]
//     [--peer-sleep-lat-us=ONE_WAY] [--ferryd-pid=PID]
//     [--out=bench-transfer.json]
// Sizes and chunks are MiB; the peer's MB/s are ucx_perftest's (MiB/s).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ferry/ferry.hpp>
#include <ferry/log.hpp>

#include "args.hpp"
#include "machine.hpp"
#include "process_stats.hpp"

namespace {

using ferry::bench::own_cpu_seconds;
using ferry::bench::own_switches;
using ferry::bench::process_cpu_seconds;
using ferry::bench::process_switches;

using Clock = std::chrono::steady_clock;
constexpr double mib = 1024.0 * 1024.0;

struct Config {
  std::string remote, token_file, tls = "default", out = "bench-transfer.json";
  std::vector<std::size_t> sizes = {1, 4, 16, 64, 256}, chunks = {1, 4, 16, 64}, sweep = {16, 256};
  std::vector<unsigned> windows = {1, 2, 4, 8};
  int reps = 5, tasks = 2000, chain = 10000;
  double idle_s = 2;
  std::map<std::size_t, double> peer_mbps;  // size MiB -> ucx_perftest ucp_am_bw MiB/s
  double peer_lat_us = 0;                   // ucx_perftest ucp_am_lat one-way µs (median)
  double peer_sleep_lat_us = 0;             // the same with -E sleep: a ping-pong whose threads block
  long ferryd_pid = 0;                      // to count ferryd's context switches per round trip
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const char* key) { return ferry::bench::option(a, key); };
    if (auto v = value("--remote=")) c.remote = *v;
    else if (auto v = value("--token-file=")) c.token_file = *v;
    else if (auto v = value("--tls=")) c.tls = *v;
    else if (auto v = value("--out=")) c.out = *v;
    else if (auto v = value("--sizes=")) c.sizes = ferry::bench::list<std::size_t>(*v);
    else if (auto v = value("--chunks=")) c.chunks = ferry::bench::list<std::size_t>(*v);
    else if (auto v = value("--sweep-mib=")) c.sweep = ferry::bench::list<std::size_t>(*v);
    else if (auto v = value("--windows=")) c.windows = ferry::bench::list<unsigned>(*v);
    else if (auto v = value("--reps=")) c.reps = std::max(1, std::stoi(*v));
    else if (auto v = value("--tasks=")) c.tasks = std::max(1, std::stoi(*v));
    else if (auto v = value("--chain=")) c.chain = std::max(1, std::stoi(*v));
    else if (auto v = value("--idle-s=")) c.idle_s = std::max(0.1, std::stod(*v));
    else if (auto v = value("--peer-lat-us=")) c.peer_lat_us = std::stod(*v);
    else if (auto v = value("--peer-sleep-lat-us=")) c.peer_sleep_lat_us = std::stod(*v);
    else if (auto v = value("--ferryd-pid=")) c.ferryd_pid = std::stol(*v);
    else if (auto v = value("--peer-bw=")) {
      for (std::size_t b = 0; b < v->size();) {
        const std::size_t e = std::min(v->find(',', b), v->size()), colon = v->find(':', b);
        if (colon >= e) throw std::invalid_argument("--peer-bw wants MIB:MBps pairs");
        c.peer_mbps[std::stoul(v->substr(b, colon - b))] = std::stod(v->substr(colon + 1, e - colon - 1));
        b = e + 1;
      }
    } else throw std::invalid_argument("unknown argument " + a + " (see the top of transfer_bench.cpp)");
  }
  if (c.remote.empty() || c.token_file.empty()) throw std::invalid_argument("--remote and --token-file are required");
  return c;
}

ferry::Runtime::Options options(const Config& c, std::size_t chunk_bytes, unsigned window, bool trace) {
  ferry::Runtime::Options o;
  o.read_environment = false;  // the sweep's chunk and window win over FERRY_*
  o.persist_perf_models = false;
  o.auto_chunk = false;  // one task moves the whole buffer: the span measured is the transfer, not a pipeline
  o.remotes = {c.remote};
  o.token_file = c.token_file;
  if (chunk_bytes != 0) o.chunk_bytes = chunk_bytes;
  if (window != 0) o.chunk_window = window;
  o.trace = trace;  // the trace's transfer spans time ship() alone: put_chunks from first send to last ack
  return o;
}

// Duration of the newest ship (to the remote) or fetch transfer span of `bytes`, from the trace.
double last_transfer_seconds(const ferry::Runtime& rt, std::size_t bytes, bool ship = true) {
  const auto doc = nlohmann::json::parse(rt.trace()->chrome_json());
  double us = -1;
  for (const auto& e : doc["traceEvents"]) {
    const std::string link = e.contains("args") ? e["args"].value("link", "") : "";
    if (e.value("cat", "") == "transfer" && (ship ? link.starts_with("host->") : link.ends_with("->host")) &&
        e["args"].value("bytes", std::size_t{0}) == bytes)
      us = e["dur"].get<double>();
  }
  if (us < 0) throw std::runtime_error(fmt::format("no {} of {} bytes in the trace", ship ? "ship" : "fetch", bytes));
  return us * 1e-6;
}
double last_ship_seconds(const ferry::Runtime& rt, std::size_t bytes) { return last_transfer_seconds(rt, bytes); }

struct Ship {
  double seconds = 1e300, end_to_end = 1e300;  // best of reps
  double fetch_seconds = 1e300;                 // bringing a buffer the remote wrote home
};

// Ships a buffer of `mib_size` MiB `reps` times; each time x.host() leaves the
// remote copy stale, so the next remote read ships all of x to a fresh replica.
Ship ship(const Config& c, std::size_t mib_size, std::size_t chunk_bytes, unsigned window) {
  ferry::Runtime rt(options(c, chunk_bytes, window, true));
  const std::size_t bytes = mib_size << 20;
  auto x = rt.buffer<float>(bytes / sizeof(float));
  {
    auto h = x.host();
    std::fill(h.data(), h.data() + bytes / sizeof(float), 1.0f);
  }
  const auto remote = ferry::on(ferry::remote());
  rt.submit("nrm2", ferry::read(x), remote).wait();  // warm-up: first replica, rendezvous set-up
  Ship best;
  for (int r = 0; r < c.reps; ++r) {
    (void)x.host();
    const auto t = Clock::now();
    rt.submit("nrm2", ferry::read(x), remote).wait();
    best.end_to_end = std::min(best.end_to_end, std::chrono::duration<double>(Clock::now() - t).count());
    best.seconds = std::min(best.seconds, last_ship_seconds(rt, bytes));
  }
  // Fetch: the remote writes x (scal by 1), then host() brings it home.
  for (int r = 0; r < c.reps; ++r) {
    rt.submit("scal", ferry::readwrite(x), 1.0, remote).wait();
    (void)x.host();
    best.fetch_seconds = std::min(best.fetch_seconds, last_transfer_seconds(rt, bytes, false));
  }
  const auto stats = rt.remote_stats(c.remote);
  if (stats.bytes_fetched < bytes * static_cast<std::size_t>(c.reps))
    throw std::runtime_error(fmt::format("only {} bytes fetched", stats.bytes_fetched));
  if (stats.bytes_shipped < bytes * static_cast<std::size_t>(c.reps + 1))
    throw std::runtime_error(fmt::format("only {} bytes shipped; the remote copy was reused", stats.bytes_shipped));
  return best;
}

struct Latency {
  double median_us = 0, mean_us = 0, p99_us = 0;
  // Voluntary context switches per round trip: each is a thread that went to
  // sleep and had to be woken, the hand-offs a round trip pays. Unlike the
  // time, the count does not depend on how loaded the machine is.
  double client_switches = 0, ferryd_switches = -1;
};

// Sequential submit + wait of scal on a 1-element buffer that stays on the remote.
// On the remote, or (on_remote false) the same empty task on the local CPU:
// the local submit->wait is part of what a remote round trip is judged by.
Latency round_trips(const Config& c, bool on_remote = true) {
  ferry::Runtime rt(options(c, 0, 0, false));
  auto y = rt.buffer<float>(1);
  y.host()[0] = 1.0f;
  const auto where = ferry::on(on_remote ? ferry::remote() : ferry::cpu());
  for (int i = 0; i < 200; ++i) rt.submit("scal", ferry::readwrite(y), 1.0, where).wait();  // y lands there
  std::vector<double> us(static_cast<std::size_t>(c.tasks));
  const long client_before = own_switches(), ferryd_before = process_switches(c.ferryd_pid);
  for (auto& u : us) {
    const auto t = Clock::now();
    rt.submit("scal", ferry::readwrite(y), 1.0, where).wait();
    u = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  }
  Latency l;
  l.client_switches = static_cast<double>(own_switches() - client_before) / c.tasks;
  if (const long after = process_switches(c.ferryd_pid); after >= 0 && ferryd_before >= 0)
    l.ferryd_switches = static_cast<double>(after - ferryd_before) / c.tasks;
  for (double u : us) l.mean_us += u / static_cast<double>(us.size());
  std::sort(us.begin(), us.end());
  l.median_us = us[us.size() / 2];
  l.p99_us = us[us.size() * 99 / 100];
  return l;
}

// Heap allocations (operator new, from this program and every library it
// loads) counted while `counting` is on: what a task costs the allocator,
// a figure that does not move with the machine's load as timings do. Blocks
// from Ferry's own pools are not heap allocations and are not counted.
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

}  // namespace

void* operator new(std::size_t bytes) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// Freed by the default aligned delete, which calls free().
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(alignment);
  if (void* p = std::aligned_alloc(align, (std::max<std::size_t>(bytes, 1) + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}

namespace {

struct Chain {
  double us_per_task = 0;
  // CPU per task of the best repetition: what the chain costs the client and
  // ferryd whatever else the machine runs (-1: ferryd not counted).
  double client_cpu_us = 0, ferryd_cpu_us = -1;
  double client_switches = 0, ferryd_switches = -1;  // voluntary context switches per task
  double client_allocations = 0;                     // heap allocations per task (a counted pass)
};

// µs per task of a chain of scal on one resident float, submitted at once
// then waited for: placed on the remote, or (the peer) on the local CPU.
Chain chain_us_per_task(const Config& c, bool on_remote) {
  ferry::Runtime::Options o = options(c, 0, 0, false);
  if (!on_remote) o.remotes.clear();
  ferry::Runtime rt(o);
  auto y = rt.buffer<float>(1);
  y.host()[0] = 1.0f;
  const auto where = on_remote ? ferry::on(ferry::remote()) : ferry::on(ferry::cpu());
  rt.submit("scal", ferry::readwrite(y), 1.0, where).wait();  // y lands there
  Chain best;
  best.us_per_task = 1e300;
  for (int r = 0; r < std::min(c.reps, 3); ++r) {
    const double client_before = own_cpu_seconds(), ferryd_before = process_cpu_seconds(c.ferryd_pid);
    const long switches_before = own_switches(), ferryd_switches_before = process_switches(c.ferryd_pid);
    const auto t = Clock::now();
    for (int i = 0; i < c.chain; ++i) rt.submit("scal", ferry::readwrite(y), 1.0, where);
    rt.wait();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count() / c.chain;
    if (us >= best.us_per_task) continue;
    best.us_per_task = us;
    best.client_cpu_us = (own_cpu_seconds() - client_before) * 1e6 / c.chain;
    best.client_switches = static_cast<double>(own_switches() - switches_before) / c.chain;
    const long ferryd_switches_after = process_switches(c.ferryd_pid);
    best.ferryd_switches = on_remote && ferryd_switches_before >= 0 && ferryd_switches_after >= 0
                               ? static_cast<double>(ferryd_switches_after - ferryd_switches_before) / c.chain
                               : -1;
    const double ferryd_after = process_cpu_seconds(c.ferryd_pid);
    best.ferryd_cpu_us = on_remote && ferryd_before >= 0 && ferryd_after >= 0
                             ? (ferryd_after - ferryd_before) * 1e6 / c.chain
                             : -1;
  }
  // Counted apart: a chain long enough that startup and the last tasks' stragglers weigh nothing.
  const int counted = std::min(c.chain, 2000);
  allocations.store(0);
  counting.store(true);
  for (int i = 0; i < counted; ++i) rt.submit("scal", ferry::readwrite(y), 1.0, where);
  rt.wait();
  counting.store(false);
  best.client_allocations = static_cast<double>(allocations.load()) / counted;
  return best;
}


// Percent of one core this process uses while a runtime with a connected remote idles.
double idle_percent(const Config& c) {
  ferry::Runtime rt(options(c, 0, 0, false));
  auto y = rt.buffer<float>(1);
  rt.submit("scal", ferry::readwrite(y), 1.0, ferry::on(ferry::remote())).wait();  // connected and used
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu0 = own_cpu_seconds();
  const auto t = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(c.idle_s));
  return 100 * (own_cpu_seconds() - cpu0) / std::chrono::duration<double>(Clock::now() - t).count();
}

double gbps(std::size_t mib_size, double seconds) { return static_cast<double>(mib_size << 20) / seconds / 1e9; }
const char* verdict(bool met) { return met ? "PASS" : "MISS"; }

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  // Each runtime's connect and trace summary would break up the tables; FERRY_LOG still wins.
  if (!std::getenv("FERRY_LOG")) ferry::log().set_level(spdlog::level::warn);
  nlohmann::json j = {{"benchmark", "transfer"}, {"revision", FERRY_GIT_REVISION}, {"machine", ferry::bench::machine()},
                      {"ucx_tls", c.tls}, {"remote", c.remote}, {"reps", c.reps}};
  const ferry::Runtime::Options defaults;

  std::printf("bulk transfer to a remote (UCX_TLS=%s), default chunk %zu MiB, window %u, best of %d\n", c.tls.c_str(),
              defaults.chunk_bytes >> 20, defaults.chunk_window, c.reps);
  // The targets: >= 95 % over TCP, >= 90 % with UCX's default
  // transports (shared memory between two processes on one host).
  const double target = c.tls == "default" ? 0.90 : 0.95;
  const std::string target_text = fmt::format("(ratios; >= {:.0f}% from 4 MiB)", 100 * target);
  std::printf("%8s %11s %13s %11s %13s %9s %9s %s\n", "size", "ship GB/s", "e2e GB/s", "fetch GB/s", "perftest GB/s",
              "ship", "fetch", target_text.c_str());
  nlohmann::json bulk = nlohmann::json::array();
  for (std::size_t m : c.sizes) {
    const Ship s = ship(c, m, 0, 0);
    const auto peer = c.peer_mbps.find(m);
    const double peer_gbps = peer == c.peer_mbps.end() ? 0 : peer->second * mib / 1e9;
    const double ratio = peer_gbps > 0 ? gbps(m, s.seconds) / peer_gbps : 0;
    const double fetch_ratio = peer_gbps > 0 ? gbps(m, s.fetch_seconds) / peer_gbps : 0;
    const std::string v =
        peer_gbps <= 0 ? "no peer" : m < 4 ? "info" : verdict(ratio >= target && fetch_ratio >= target);
    std::printf("%5zu MiB %11.2f %13.2f %11.2f %13.2f %8.1f%% %8.1f%% %s\n", m, gbps(m, s.seconds),
                gbps(m, s.end_to_end), gbps(m, s.fetch_seconds), peer_gbps, 100 * ratio, 100 * fetch_ratio, v.c_str());
    bulk.push_back({{"mib", m}, {"ship_gbps", gbps(m, s.seconds)}, {"end_to_end_gbps", gbps(m, s.end_to_end)},
                    {"fetch_gbps", gbps(m, s.fetch_seconds)}, {"perftest_gbps", peer_gbps}, {"ratio", ratio},
                    {"fetch_ratio", fetch_ratio}, {"verdict", v}});
  }
  j["bulk"] = bulk;

  std::printf("\nchunk x window sweep (ship GB/s, best of %d)\n", c.reps);
  nlohmann::json sweep = nlohmann::json::array();
  for (std::size_t m : c.sweep) {
    std::printf("%4zu MiB  chunk\\window", m);
    for (unsigned w : c.windows) std::printf(" %7u", w);
    std::printf("\n");
    for (std::size_t ch : c.chunks) {
      if (ch > m) continue;
      std::printf("%22s", fmt::format("{} MiB", ch).c_str());
      for (unsigned w : c.windows) {
        const Ship s = ship(c, m, ch << 20, w);
        std::printf(" %7.2f", gbps(m, s.seconds));
        std::fflush(stdout);
        sweep.push_back({{"mib", m}, {"chunk_mib", ch}, {"window", w}, {"ship_gbps", gbps(m, s.seconds)}});
      }
      std::printf("\n");
    }
  }
  j["sweep"] = sweep;

  const Latency l = round_trips(c);
  const double peer_rtt = 2 * c.peer_lat_us;
  const double ratio = peer_rtt > 0 ? l.median_us / peer_rtt : 0;
  std::printf("\nempty remote task round trip, %d sequential submit+wait of scal on 1 resident float\n", c.tasks);
  std::printf("ferry median %.1f us (mean %.1f, p99 %.1f); ucx_perftest am round trip %.2f us (2 x %.3f one-way)\n",
              l.median_us, l.mean_us, l.p99_us, peer_rtt, c.peer_lat_us);
  std::printf("ratio %.2fx (target <= 2x): %s\n", ratio, peer_rtt > 0 ? verdict(ratio <= 2.0) : "no peer");
  const double sleep_rtt = 2 * c.peer_sleep_lat_us;
  if (sleep_rtt > 0)
    std::printf("ucx_perftest am round trip with blocking threads (-E sleep) %.2f us: ferry %.2fx that\n", sleep_rtt,
                l.median_us / sleep_rtt);
  // The restated target: a round trip is at most UCX's blocking ping-pong
  // and Ferry's own local submit->wait, each twice (client and ferryd).
  const Latency local_rt = round_trips(c, false);
  const double restated = 2 * sleep_rtt + 2 * local_rt.median_us;
  std::printf("local submit+wait of the same task: median %.2f us; target <= 2 x %.2f + 2 x %.2f = %.2f us: %s\n",
              local_rt.median_us, sleep_rtt, local_rt.median_us, restated,
              sleep_rtt > 0 ? verdict(l.median_us <= restated) : "no peer");
  std::printf("context switches per round trip: client %.2f, ferryd %s\n", l.client_switches,
              l.ferryd_switches >= 0 ? fmt::format("{:.2f}", l.ferryd_switches).c_str() : "not counted");
  j["round_trip"] = {{"tasks", c.tasks}, {"median_us", l.median_us}, {"mean_us", l.mean_us}, {"p99_us", l.p99_us},
                     {"perftest_rtt_us", peer_rtt}, {"ratio", ratio}, {"perftest_sleep_rtt_us", sleep_rtt},
                     {"local_submit_wait_us", local_rt.median_us}, {"restated_target_us", restated},
                     {"client_switches", l.client_switches}, {"ferryd_switches", l.ferryd_switches},
                     {"verdict", peer_rtt > 0 ? verdict(ratio <= 2.0) : "no peer"}};

  const Chain local_chain = chain_us_per_task(c, false), remote_chain = chain_us_per_task(c, true);
  const double local = local_chain.us_per_task, remote = remote_chain.us_per_task;
  std::printf("\n%d-task readwrite chain (scal on 1 resident float), submitted at once, best of %d\n", c.chain,
              std::min(c.reps, 3));
  std::printf("remote %.2f us/task; local CPU %.2f us/task (%.1fx local); target <= 3 us/task: %s\n", remote, local,
              remote / local, verdict(remote <= 3.0));
  std::printf("per remote task: CPU client %.2f us, ferryd %s; context switches client %.2f, ferryd %s\n",
              remote_chain.client_cpu_us,
              remote_chain.ferryd_cpu_us >= 0 ? fmt::format("{:.2f} us", remote_chain.ferryd_cpu_us).c_str()
                                              : "not counted",
              remote_chain.client_switches,
              remote_chain.ferryd_switches >= 0 ? fmt::format("{:.2f}", remote_chain.ferryd_switches).c_str()
                                                : "not counted");
  std::printf("heap allocations per task in this process (operator new; pool blocks not counted): remote %.1f, "
              "local %.1f\n",
              remote_chain.client_allocations, local_chain.client_allocations);
  j["chain"] = {{"tasks", c.chain},
                {"client_allocations_per_task", remote_chain.client_allocations},
                {"local_allocations_per_task", local_chain.client_allocations},
                {"remote_us_per_task", remote},
                {"local_us_per_task", local},
                {"client_cpu_us_per_task", remote_chain.client_cpu_us},
                {"ferryd_cpu_us_per_task", remote_chain.ferryd_cpu_us},
                {"client_switches_per_task", remote_chain.client_switches},
                {"ferryd_switches_per_task", remote_chain.ferryd_switches},
                {"verdict", verdict(remote <= 3.0)}};

  const double idle = idle_percent(c);
  std::printf("\nidle runtime with a connected remote: %.2f %% of a core over %.1f s (target < 1 %%): %s\n", idle,
              c.idle_s, verdict(idle < 1.0));
  j["idle"] = {{"percent_of_core", idle}, {"seconds", c.idle_s}, {"verdict", verdict(idle < 1.0)}};
  std::ofstream(c.out) << j.dump(2) << '\n';
  std::printf("JSON written to %s\n", c.out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ferry_bench_transfer: %s\n", e.what());
  return 1;
}
