// a chunked pipeline over a shaped link reaches >= 90 % of the
// max(stage) bound. A streaming transform: each chunk of x is mapped (sqrt) on
// the remote into y, and a CPU task sums each chunk of y as it is done, so
// results come home while later chunks are still going out. Runs where
// FERRY_REMOTES names a ferryd (bench/run_pipeline_bench.sh sets up a shaped
// link between two network namespaces).
//   ferry_bench_pipeline [--mib=256] [--chunks=8,16,32] [--windows=2,4,8] [--reps=3]
//                        [--op=sqrt] [--link=TEXT] [--trace=FILE] [--out=bench-pipeline.json]
// FERRY_CHUNK_WINDOW / FERRY_CHUNK_BYTES, when set, replace the window sweep /
// the transfer chunk size. The hand-split rows run with automatic chunking
// off; a last line runs the whole map with it on ("no user split()").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ferry/ferry.hpp>

#include "args.hpp"
#include "machine.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Config {
  std::size_t mib = 256;
  std::vector<std::size_t> chunks = {8, 16, 32};  // task-level chunk sizes, MiB
  std::vector<unsigned> windows = {2, 4, 8};      // transfer chunks in flight
  int reps = 3;
  std::string op = "sqrt", link = "unknown", trace, out = "bench-pipeline.json";
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const char* key) { return ferry::bench::option(a, key); };
    if (auto v = value("--mib=")) c.mib = std::stoul(*v);
    else if (auto v = value("--chunks=")) c.chunks = ferry::bench::list<std::size_t>(*v);
    else if (auto v = value("--windows=")) c.windows = ferry::bench::list<unsigned>(*v);
    else if (auto v = value("--reps=")) c.reps = std::max(1, std::stoi(*v));
    else if (auto v = value("--op=")) c.op = *v;
    else if (auto v = value("--link=")) c.link = *v;
    else if (auto v = value("--trace=")) c.trace = *v;
    else if (auto v = value("--out=")) c.out = *v;
    else throw std::invalid_argument("unknown argument " + a + " (see the top of pipeline_bench.cpp)");
  }
  if (const char* w = std::getenv("FERRY_CHUNK_WINDOW")) c.windows = ferry::bench::list<unsigned>(w);
  return c;
}

// One runtime per window: the window is fixed when a remote connects. The
// environment is read here, not by the runtime, so that the sweep's window wins.
ferry::Runtime::Options options(unsigned window, bool trace, const Config& c, bool auto_chunk = false) {
  ferry::Runtime::Options o;
  o.read_environment = false;
  o.auto_chunk = auto_chunk;  // off for the hand-split rows: they measure split() alone
  o.persist_perf_models = false;  // every task is pinned; nothing to learn
  if (const char* r = std::getenv("FERRY_REMOTES")) o.remotes = ferry::bench::words(r);
  if (const char* t = std::getenv("FERRY_TOKEN_FILE")) o.token_file = t;
  if (const char* t = std::getenv("FERRY_TOKEN")) o.token = t;
  if (const char* b = std::getenv("FERRY_CHUNK_BYTES")) o.chunk_bytes = std::stoul(b);
  o.chunk_window = window;
  o.trace = trace;
  if (trace) o.trace_path = c.trace;
  return o;
}

double expected_total(std::size_t n, const std::string& op) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += op == "sqrt" ? std::sqrt(double(i % 1024)) : double(i % 1024);
  return s;
}

struct Stages {
  double in = 1e300, compute = 1e300, out = 1e300, consume = 1e300;
  double bound() const { return std::max({in, compute, out}); }
};

// Each stage alone, on the whole data. x.host() makes the remote copy stale,
// so the next remote read ships all of x again.
void measure_stages(ferry::Runtime& rt, ferry::Buffer<float>& x, ferry::Buffer<float>& y, const Config& c, Stages& s) {
  const auto remote = ferry::on(ferry::remote());
  for (int r = 0; r < c.reps; ++r) {
    (void)x.host();
    auto t = Clock::now();
    rt.submit("sum", ferry::read(x), remote).wait();
    const double ship_and_sum = ms_since(t);
    t = Clock::now();
    rt.submit("sum", ferry::read(x), remote).wait();  // x is there now: compute and a round trip only
    s.in = std::min(s.in, ship_and_sum - ms_since(t));
    rt.submit("map", ferry::read(x), ferry::write(y), c.op, remote).wait();
    t = Clock::now();
    rt.submit("map", ferry::read(x), ferry::write(y), c.op, remote).wait();
    s.compute = std::min(s.compute, ms_since(t));
    t = Clock::now();
    (void)y.host();  // y was written remotely: this brings it home
    s.out = std::min(s.out, ms_since(t));
    t = Clock::now();
    rt.submit("sum", ferry::read(y), ferry::on(ferry::cpu())).wait();
    s.consume = std::min(s.consume, ms_since(t));
  }
}

// The pipeline in `parts` chunks; returns ms from the first submit to the last
// CPU sum, or throws on a wrong total.
double pipeline(ferry::Runtime& rt, ferry::Buffer<float>& x, ferry::Buffer<float>& y, std::size_t parts,
                const Config& c, double expect) {
  (void)x.host();  // start with the input on the CPU machine only
  auto xs = x.split(parts), ys = y.split(parts);
  const auto t = Clock::now();
  std::vector<ferry::Task> sums;
  for (std::size_t i = 0; i < parts; ++i) {
    rt.submit("map", ferry::read(xs[i]), ferry::write(ys[i]), c.op, ferry::on(ferry::remote()));
    sums.push_back(rt.submit("sum", ferry::read(ys[i]), ferry::on(ferry::cpu())));
  }
  double total = 0;
  for (auto& s : sums) total += s.result();
  const double ms = ms_since(t);
  if (std::abs(total - expect) > 1e-3 * std::abs(expect))
    throw std::runtime_error(fmt::format("wrong total with {} chunks: {} (expected {})", parts, total, expect));
  return ms;
}

// No user split(): one map over the whole of x on the remote, then y brought
// home; automatic chunking decides the pieces. The map is the chunkable task
// the bound is about, so its time ends once y is on the host. The CPU sum of
// the whole y that checks the result is a task of its own that no split of the
// map can overlap (a reduction is not chunkable): it is timed apart.
struct Unsplit {
  double ms = 1e300;           // map submitted .. y home
  double with_sum_ms = 1e300;  // .. and the whole-y CPU sum done
  double busy_core_ms = 0;     // the machine's CPU busy meanwhile (map .. y home), all cores together
};

Unsplit unsplit(ferry::Runtime& rt, ferry::Buffer<float>& x, ferry::Buffer<float>& y, const Config& c, double expect) {
  (void)x.host();
  const double busy_before = ferry::bench::busy_core_seconds();
  const auto t = Clock::now();
  rt.submit("map", ferry::read(x), ferry::write(y), c.op, ferry::on(ferry::remote()));
  (void)y.host();
  Unsplit u;
  u.ms = ms_since(t);
  u.busy_core_ms = (ferry::bench::busy_core_seconds() - busy_before) * 1e3;
  const double total = rt.submit("sum", ferry::read(y), ferry::on(ferry::cpu())).result();
  u.with_sum_ms = ms_since(t);
  if (std::abs(total - expect) > 1e-3 * std::abs(expect))
    throw std::runtime_error(fmt::format("wrong total with automatic chunking: {} (expected {})", total, expect));
  return u;
}

struct Row {
  std::size_t chunk_mib;
  unsigned window;
  double ms;
};

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  if (!std::getenv("FERRY_REMOTES")) {
    std::fprintf(stderr, "ferry_bench_pipeline: FERRY_REMOTES is not set; run it through bench/run_pipeline_bench.sh\n");
    return 2;
  }
  const std::size_t n = c.mib << 18;  // float32 elements
  const double expect = expected_total(n, c.op);
  Stages stages;
  std::vector<Row> rows;
  for (unsigned window : c.windows) {
    const bool trace = !c.trace.empty() && window == c.windows.front();
    ferry::Runtime rt(options(window, trace, c));
    const auto input = [&] {
      auto x = rt.buffer<float>(n);
      auto h = x.host();
      for (std::size_t i = 0; i < n; ++i) h[i] = float(i % 1024);
      return x;
    };
    {
      auto x = input();
      auto y = rt.buffer<float>(n);
      measure_stages(rt, x, y, c, stages);
    }
    std::vector<std::size_t> sizes = {c.mib};  // unchunked first
    for (std::size_t m : c.chunks)
      if (m < c.mib && c.mib % m == 0) sizes.push_back(m);
    for (std::size_t m : sizes) {
      // Fresh buffers per chunk size: the runtime lists a reader of one chunk
      // as a reader of any coarser region it overlaps, so after whole-buffer
      // tasks on y the map of chunk i+1 would wait for the sum of chunk i.
      auto x = input();
      auto y = rt.buffer<float>(n);
      double best = 1e300;
      for (int r = 0; r < c.reps; ++r) best = std::min(best, pipeline(rt, x, y, c.mib / m, c, expect));
      rows.push_back({m, window, best});
    }
  }

  // Automatic chunking at the first window, beside the rows above.
  Unsplit automatic;
  {
    Config traced = c;  // its own trace beside the hand-split one: shows the pieces
    if (!traced.trace.empty()) traced.trace += ".auto.json";
    ferry::Runtime rt(options(c.windows.front(), !traced.trace.empty(), traced, true));
    auto x = rt.buffer<float>(n);
    auto h = x.host();
    for (std::size_t i = 0; i < n; ++i) h[i] = float(i % 1024);
    auto y = rt.buffer<float>(n);
    for (int r = 0; r < c.reps; ++r) {
      const Unsplit u = unsplit(rt, x, y, c, expect);
      if (u.ms < automatic.ms) automatic.busy_core_ms = u.busy_core_ms;
      automatic.ms = std::min(automatic.ms, u.ms);
      automatic.with_sum_ms = std::min(automatic.with_sum_ms, u.with_sum_ms);
    }
  }

  const double bound = stages.bound();
  std::printf("chunked pipeline, %zu MiB float32, op %s, link %s, best of %d\n", c.mib, c.op.c_str(), c.link.c_str(),
              c.reps);
  std::printf("stages alone: in %.1f ms, remote compute %.1f ms, out %.1f ms (CPU consumer %.1f ms) -> bound %.1f ms\n",
              stages.in, stages.compute, stages.out, stages.consume, bound);
  std::printf("%-10s %6s %12s %11s %11s\n", "chunk", "window", "achieved ms", "efficiency", "vs unchunked");
  const Row* best = nullptr;
  double unchunked = 0;
  nlohmann::json jrows = nlohmann::json::array();
  for (const Row& r : rows) {
    if (r.chunk_mib == c.mib) unchunked = r.ms;
    std::printf("%-10s %6u %12.1f %10.1f%% %10.2fx\n", fmt::format("{} MiB", r.chunk_mib).c_str(), r.window, r.ms,
                100 * bound / r.ms, unchunked / r.ms);
    if (r.chunk_mib != c.mib && (!best || r.ms < best->ms)) best = &r;
    jrows.push_back({{"chunk_mib", r.chunk_mib}, {"window", r.window}, {"ms", r.ms}, {"efficiency", bound / r.ms},
                     {"speedup_vs_unchunked", unchunked / r.ms}});
  }
  nlohmann::json j = {{"benchmark", "pipeline"}, {"revision", FERRY_GIT_REVISION}, {"machine", ferry::bench::machine()},
                      {"link", c.link}, {"mib", c.mib}, {"op", c.op}, {"reps", c.reps},
                      {"stages_ms", {{"in", stages.in}, {"compute", stages.compute}, {"out", stages.out},
                                     {"cpu_consume", stages.consume}}},
                      {"bound_ms", bound}, {"rows", jrows}};
  if (best) {
    const double eff = bound / best->ms;
    double unchunked_same_window = 0;
    for (const Row& r : rows)
      if (r.chunk_mib == c.mib && r.window == best->window) unchunked_same_window = r.ms;
    std::printf("best: %zu MiB chunks, window %u: %.1f ms = %.1f %% of the bound (target >= 90 %%: %s), %.2fx unchunked\n",
                best->chunk_mib, best->window, best->ms, 100 * eff,
                eff >= 0.9 ? "met" : fmt::format("missed by {:.1f} points", 100 * (0.9 - eff)).c_str(),
                unchunked_same_window / best->ms);
    j["best"] = {{"chunk_mib", best->chunk_mib}, {"window", best->window}, {"ms", best->ms}, {"efficiency", eff},
                 {"target_met", eff >= 0.9}};
  }
  double unchunked_first = 0;
  for (const Row& r : rows)
    if (r.chunk_mib == c.mib && r.window == c.windows.front()) unchunked_first = r.ms;
  const double auto_eff = bound / automatic.ms;
  std::printf("no user split() (automatic chunking), window %u: map and y home in %.1f ms = %.1f %% of the bound "
              "(target >= 90 %%: %s); with the whole-y CPU sum after it %.1f ms, %.2fx unchunked\n",
              c.windows.front(), automatic.ms, 100 * auto_eff,
              auto_eff >= 0.9 ? "met" : fmt::format("missed by {:.1f} points", 100 * (0.9 - auto_eff)).c_str(),
              automatic.with_sum_ms, unchunked_first / automatic.with_sum_ms);
  // The bound assumes the stages' CPU work fits beside each other: on a
  // machine with few cores, encrypting, copying through both ends' TCP
  // stacks and computing may together need more CPU than the cores give in
  // the bound's time, and then no split reaches it.
  const double cores = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
  const double cpu_floor_ms = automatic.busy_core_ms / cores;
  std::printf("  the machine's CPU was busy %.0f core-ms meanwhile (every process and the kernel): on %.0f cores at "
              "least %.1f ms = %.0f %% of the time achieved, %.0f %% of the bound\n",
              automatic.busy_core_ms, cores, cpu_floor_ms, 100 * cpu_floor_ms / automatic.ms,
              100 * cpu_floor_ms / bound);
  j["automatic"] = {{"window", c.windows.front()}, {"ms", automatic.ms}, {"with_sum_ms", automatic.with_sum_ms},
                    {"efficiency", auto_eff}, {"target_met", auto_eff >= 0.9},
                    {"busy_core_ms", automatic.busy_core_ms}, {"cores", cores}};
  std::ofstream(c.out) << j.dump(2) << '\n';
  std::printf("JSON written to %s\n", c.out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ferry_bench_pipeline: %s\n", e.what());
  return 1;
}
