// A pool of hosts (bench/run_pool_bench.sh starts them with
// tests/integration/pool_hosts.sh, each ferryd in its own network namespace
// behind its own shaped link):
//
//   --mode=scaling: sleep_ms tasks (tests/plugins: a lane held without the
//     CPU, standing in for GPU work on a 2-core machine) on 1, 2 and 3 hosts;
//     throughput ratios against one host (targets 1.9x and 2.7x).
//   --mode=placement: CPU + two hosts on different links; a gemm size sweep
//     and a mixed DAG (tiled Cholesky plus independent small tasks), the
//     default policy's makespan against every fixed placement (all-CPU,
//     all-A, all-B) and the per-size oracle, ratios printed (target ≤ 1.05).
//
//   ferry_bench_pool --mode=scaling|placement --plugin=LIB [--out=FILE] [--reps=N]
// Reads FERRY_REMOTES (and the token) from pool_hosts.sh; remotes in its order.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ferry/ferry.hpp>

#include "args.hpp"
#include "machine.hpp"
#include "tiled_cholesky.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string mode, plugin, out;
  int reps = 3;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<std::string> remotes_from_env() {
  std::vector<std::string> out;
  const char* v = std::getenv("FERRY_REMOTES");
  if (v == nullptr) return out;
  std::string s(v);
  for (std::size_t b = 0; b < s.size();) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// A runtime on `remotes` under `policy`; models start empty (no earlier run decides).
std::unique_ptr<ferry::Runtime> make_runtime(const std::vector<std::string>& remotes, ferry::Policy policy,
                                             const std::string& plugin, unsigned workers = 0) {
  ferry::Runtime::Options o;
  o.workers = workers;
  o.remotes = remotes;
  o.policy = policy;
  o.persist_perf_models = false;
  o.trace = true;  // where the default policy put the DAG's tasks, printed beside its time
  auto rt = std::make_unique<ferry::Runtime>(o);
  if (!plugin.empty()) rt->load_plugin(plugin);
  return rt;
}

// ---- scaling ----

// Seconds for `tasks` sleep_ms tasks of `ms` each, all submitted at once.
double sleep_batch(ferry::Runtime& rt, int tasks, double ms) {
  std::vector<ferry::Buffer<float>> x;
  for (int i = 0; i < tasks; ++i) x.push_back(rt.buffer<float>(1, 1));
  const auto start = Clock::now();
  std::vector<ferry::Task> t;
  for (int i = 0; i < tasks; ++i) t.push_back(rt.submit("sleep_ms", ferry::readwrite(x[i]), ms));
  for (auto& task : t) task.wait();
  return seconds_since(start);
}

nlohmann::json scaling(const Config& c, const std::vector<std::string>& remotes) {
  constexpr int tasks = 48;
  constexpr double ms = 50;
  nlohmann::json rows = nlohmann::json::array();
  double one = 0;
  for (std::size_t k = 1; k <= remotes.size(); ++k) {
    // Policy gpu: remotes only, so the client's own CPU takes none of the work.
    auto rt = make_runtime({remotes.begin(), remotes.begin() + static_cast<long>(k)}, ferry::Policy::gpu, c.plugin);
    sleep_batch(*rt, static_cast<int>(4 * k), 20);  // warm-up: every host measured
    double best = 1e300;
    for (int r = 0; r < c.reps; ++r) best = std::min(best, sleep_batch(*rt, tasks, ms));
    if (k == 1) one = best;
    const double speedup = one / best;
    std::printf("scaling: %zu host%s: %d x %.0f ms sleep_ms tasks in %.3f s, %.1f tasks/s, %.2fx one host%s\n", k,
                k == 1 ? " " : "s", tasks, ms, best, tasks / best, speedup,
                k == 2 ? " (target >= 1.9x)" : k == 3 ? " (target >= 2.7x)" : "");
    rows.push_back({{"hosts", k}, {"seconds", best}, {"tasks_per_second", tasks / best}, {"speedup", speedup}});
  }
  return rows;
}

// ---- placement ----

struct Placement {
  std::string name;
  std::vector<std::string> remotes;
  ferry::Policy policy;
};

// gemm on `count` independent m x m problems, results home: seconds.
double gemm_round(ferry::Runtime& rt, std::size_t m, int count) {
  std::vector<ferry::Buffer<float>> a, b, out;
  for (int i = 0; i < count; ++i) {
    a.push_back(rt.buffer<float>(m, m));
    b.push_back(rt.buffer<float>(m, m));
    out.push_back(rt.buffer<float>(m, m));
    auto ha = a.back().host(), hb = b.back().host();
    std::fill(ha.begin(), ha.end(), 0.5f);
    std::fill(hb.begin(), hb.end(), 0.25f);
  }
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) rt.submit("gemm", ferry::read(a[i]), ferry::read(b[i]), ferry::readwrite(out[i]));
  for (auto& o : out) (void)o.host();
  return seconds_since(start);
}

// Tiled Cholesky (n, tile) beside `small` independent axpy tasks, results home.
double mixed_dag(ferry::Runtime& rt, std::size_t n, std::size_t tile, int small) {
  auto a = rt.buffer<double>(n, n);
  ferry::samples::fill_spd(a, 7);
  std::vector<ferry::Buffer<float>> x, y;
  for (int i = 0; i < small; ++i) {
    x.push_back(rt.buffer<float>(16384));
    y.push_back(rt.buffer<float>(16384));
    auto hx = x.back().host(), hy = y.back().host();
    std::fill(hx.begin(), hx.end(), 1.0f);
    std::fill(hy.begin(), hy.end(), 2.0f);
  }
  const auto start = Clock::now();
  auto tiles = a.tiles(tile, tile);
  ferry::samples::submit_tiled_cholesky(rt, tiles);
  for (int i = 0; i < small; ++i) rt.submit("axpy", ferry::read(x[i]), ferry::readwrite(y[i]), 0.5);
  (void)a.host();
  for (auto& v : y) (void)v.host();
  return seconds_since(start);
}

nlohmann::json placement(const Config& c, const std::vector<std::string>& remotes) {
  const std::vector<Placement> placements = {
      {"default (heft)", remotes, ferry::Policy::heft},
      {"all-CPU", {}, ferry::Policy::cpu},
      {"all-A", {remotes[0]}, ferry::Policy::gpu},
      {"all-B", {remotes[1]}, ferry::Policy::gpu},
  };
  const std::vector<std::size_t> sizes = {64, 128, 256, 512};
  constexpr int per_size = 4;
  std::map<std::string, std::vector<double>> sweep;  // placement -> seconds per size
  std::map<std::string, double> dag;
  for (const auto& p : placements) {
    // One worker: run_pool_bench.sh gives the client one core and the hosts the other.
    auto rt = make_runtime(p.remotes, p.policy, {}, 1);
    // Warm-up: every device the placement may use measured in every size
    // bucket (heft explores the uncalibrated ones), so the timed rounds
    // show its decisions, not its calibration.
    for (int w = 0; w < 3; ++w)
      for (std::size_t m : sizes) gemm_round(*rt, m, per_size);
    mixed_dag(*rt, 1024, 256, 16);
    for (std::size_t m : sizes) {
      double best = 1e300;
      for (int r = 0; r < c.reps; ++r) best = std::min(best, gemm_round(*rt, m, per_size));
      sweep[p.name].push_back(best);
    }
    double best = 1e300;
    std::map<std::string, int> where;
    for (int r = 0; r < c.reps; ++r) {
      const std::size_t before = rt->trace()->tasks().size();
      const double t = mixed_dag(*rt, 1024, 256, 16);
      if (t < best) {
        best = t;
        where.clear();
        const auto spans = rt->trace()->tasks();
        for (std::size_t i = before; i < spans.size(); ++i) ++where[spans[i].kernel + " on " + spans[i].device];
      }
    }
    dag[p.name] = best;
    if (&p == &placements[0]) {
      std::printf("mixed DAG, default policy, its best run's tasks:");
      for (const auto& [what, n] : where) std::printf(" %s x%d;", what.c_str(), n);
      std::printf("\n");
    }
  }

  nlohmann::json j;
  std::printf("gemm sweep (%d independent f32 gemms per size, results home), ms:\n  %-16s", per_size, "size");
  for (std::size_t m : sizes) std::printf(" %8zu", m);
  std::printf(" %9s\n", "total");
  std::map<std::string, double> total;
  for (const auto& p : placements) {
    std::printf("  %-16s", p.name.c_str());
    for (double s : sweep[p.name]) std::printf(" %8.2f", s * 1e3), total[p.name] += s;
    std::printf(" %9.2f\n", total[p.name] * 1e3);
  }
  double oracle = 0;
  std::printf("  %-16s", "per-size oracle");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    double best = 1e300;
    for (const auto& p : placements)
      if (p.name != placements[0].name) best = std::min(best, sweep[p.name][i]);
    oracle += best;
    std::printf(" %8.2f", best * 1e3);
  }
  std::printf(" %9.2f\n", oracle * 1e3);
  double best_fixed = 1e300;
  for (const auto& p : placements)
    if (p.name != placements[0].name) best_fixed = std::min(best_fixed, total[p.name]);
  const double d = total[placements[0].name];
  std::printf("gemm sweep: default / best fixed placement = %.3f, default / per-size oracle = %.3f (target <= 1.05)\n",
              d / best_fixed, d / oracle);

  double dag_fixed = 1e300;
  std::printf("mixed DAG (tiled Cholesky 1024, tile 256, + 16 small axpy), ms:");
  for (const auto& p : placements) {
    std::printf(" %s %.2f;", p.name.c_str(), dag[p.name] * 1e3);
    if (p.name != placements[0].name) dag_fixed = std::min(dag_fixed, dag[p.name]);
  }
  std::printf("\nmixed DAG: default / best fixed placement = %.3f (target <= 1.05)\n", dag[placements[0].name] / dag_fixed);

  j["sizes"] = sizes;
  j["sweep_seconds"] = sweep;
  j["sweep_oracle_seconds"] = oracle;
  j["sweep_default_over_best_fixed"] = d / best_fixed;
  j["sweep_default_over_oracle"] = d / oracle;
  j["dag_seconds"] = dag;
  j["dag_default_over_best_fixed"] = dag[placements[0].name] / dag_fixed;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto v = ferry::bench::option(arg, "--mode=")) c.mode = *v;
    else if (auto v = ferry::bench::option(arg, "--plugin=")) c.plugin = *v;
    else if (auto v = ferry::bench::option(arg, "--out=")) c.out = *v;
    else if (auto v = ferry::bench::option(arg, "--reps=")) c.reps = std::max(1, std::stoi(*v));
    else {
      std::fprintf(stderr, "ferry_bench_pool: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  const auto remotes = remotes_from_env();
  // Each runtime below names its own remotes: the environment's list must not override them.
  unsetenv("FERRY_REMOTES");
  unsetenv("FERRY_POLICY");
  nlohmann::json result;
  if (c.mode == "scaling") {
    if (remotes.size() != 3 || c.plugin.empty()) {
      std::fprintf(stderr, "ferry_bench_pool --mode=scaling: needs three remotes and --plugin=sleep plugin\n");
      return 2;
    }
    result = scaling(c, remotes);
  } else if (c.mode == "placement") {
    if (remotes.size() != 2) {
      std::fprintf(stderr, "ferry_bench_pool --mode=placement: needs two remotes\n");
      return 2;
    }
    result = placement(c, remotes);
  } else {
    std::fprintf(stderr, "ferry_bench_pool: --mode=scaling or --mode=placement\n");
    return 2;
  }
  if (c.out.empty()) c.out = "bench-pool-" + c.mode + ".json";
  nlohmann::json j = {{"benchmark", "pool-" + c.mode}, {"revision", FERRY_GIT_REVISION},
                      {"machine", ferry::bench::machine()}, {"results", result}};
  std::ofstream(c.out) << j.dump(2) << '\n';
  std::printf("JSON written to %s\n", c.out.c_str());
  return 0;
}
