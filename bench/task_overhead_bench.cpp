// Empty-task overhead: how long a task costs when its kernel does
// nothing, from the first submit to the wait returning, for Ferry and its
// peers in the same run and on the same cores.
//   independent: N tasks with no buffers, so nothing orders them;
//   chain:       N tasks that all read and write one buffer, so each waits
//                for the one before (Ferry and StarPU infer that order).
// Prints a table, the ratios against Ferry and the verdicts against the
// targets, and writes JSON (bench-tasks.json unless --out=FILE says otherwise).
// Heap allocations per task are counted in a separate pass, for every
// system: a figure that does not move with the machine's load.
//   ferry_bench_tasks [--tasks=100000] [--reps=3] [--workers=2] [--out=FILE] [--only=ferry|tbb|starpu]
#include <fmt/format.h>
#include <sys/utsname.h>
#include <tbb/task_group.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ferry/ferry.hpp>
#include "machine.hpp"

#if FERRY_BENCH_WITH_STARPU
#include "starpu_support.hpp"
#endif

// Heap allocations (malloc and what calls it: operator new, oneTBB's task
// memory) counted while `counting` is on. glibc's own entry points do the
// work; blocks from Ferry's pools are not heap allocations.
namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
void count_one() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t bytes);
void* __libc_calloc(std::size_t n, std::size_t bytes);
void* __libc_realloc(void* ptr, std::size_t bytes);
void* __libc_memalign(std::size_t alignment, std::size_t bytes);

void* malloc(std::size_t bytes) noexcept {
  count_one();
  return __libc_malloc(bytes);
}
void* calloc(std::size_t n, std::size_t bytes) noexcept {
  count_one();
  return __libc_calloc(n, bytes);
}
void* realloc(void* ptr, std::size_t bytes) noexcept {
  count_one();
  return __libc_realloc(ptr, bytes);
}
void* aligned_alloc(std::size_t alignment, std::size_t bytes) noexcept {
  count_one();
  return __libc_memalign(alignment, bytes);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t bytes) noexcept {
  count_one();
  void* p = __libc_memalign(alignment, bytes);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace {

constexpr double target_independent_us = 0.5;
constexpr double target_chain_us = 1.0;
constexpr std::size_t warmup_tasks = 2000;

struct Config {
  std::size_t tasks = 100000;
  int reps = 3;
  unsigned workers = 2;  // Ferry's; the peers use 2 cores as well
  std::string out = "bench-tasks.json";
  std::string only;  // run just this system (e.g. under callgrind)
};

// µs per task of each repetition; the table shows the best, JSON keeps all.
struct Series {
  std::vector<double> runs;
  double allocations = 0;  // heap allocations per task, from a counted pass
  double best() const { return runs.empty() ? 0.0 : *std::ranges::min_element(runs); }
  double median() const {
    if (runs.empty()) return 0.0;
    std::vector<double> s = runs;
    std::ranges::sort(s);
    return s[s.size() / 2];
  }
};

struct Row {
  std::string system;
  std::string note;  // what the chain is, or why there are no numbers
  std::optional<Series> independent, chain;
};

using Clock = std::chrono::steady_clock;

// Times `batch(n)` (which must submit n tasks and wait for them) `reps` times.
Series measure(const Config& c, const std::function<void(std::size_t)>& batch) {
  batch(warmup_tasks);  // threads started, pools and queues grown
  Series s;
  for (int r = 0; r < c.reps; ++r) {
    const auto start = Clock::now();
    batch(c.tasks);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    s.runs.push_back(us / static_cast<double>(c.tasks));
  }
  // Counted apart from the timed runs, so that counting costs them nothing.
  const std::size_t counted = std::min<std::size_t>(c.tasks, 20000);
  allocations.store(0);
  counting.store(true);
  batch(counted);
  counting.store(false);
  s.allocations = static_cast<double>(allocations.load()) / static_cast<double>(counted);
  return s;
}

Row run_ferry(const Config& c) {
  ferry::Runtime::Options o;
  o.workers = c.workers;
  o.persist_perf_models = false;
  o.read_environment = false;
  ferry::Runtime rt(o);
  auto empty = rt.kernel("empty", [] {});
  auto touch = rt.kernel("touch", [](ferry::InOut<double>) {});
  auto x = rt.buffer<double>(1);
  Row row{fmt::format("Ferry ({} workers, heft)", c.workers), "chain: readwrite(x), deps inferred", {}, {}};
  row.independent = measure(c, [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) rt.submit(empty);
    rt.wait();
  });
  row.chain = measure(c, [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) rt.submit(touch, ferry::readwrite(x));
    rt.wait();
  });
  return row;
}

// A chain in TBB has no data to infer it from, so each task spawns its
// successor into the same task_group: the cost of one dependency that is
// known in advance, with no tracking at all. A lower bound, not a peer API.
struct TbbLink {
  tbb::task_group* group;
  std::size_t left;
  void operator()() const {
    if (left > 1) group->run(TbbLink{group, left - 1});
  }
};

Row run_tbb(const Config& c) {
  // The default arena: one thread per core, the waiting thread included.
  Row row{"oneTBB task_group", "chain: each task runs the next", {}, {}};
  row.independent = measure(c, [](std::size_t n) {
    tbb::task_group tg;
    for (std::size_t i = 0; i < n; ++i) tg.run([] {});
    tg.wait();
  });
  row.chain = measure(c, [](std::size_t n) {
    tbb::task_group tg;
    tg.run(TbbLink{&tg, n});
    tg.wait();
  });
  return row;
}

#if FERRY_BENCH_WITH_STARPU
void starpu_empty(void** /*buffers*/, void* /*cl_arg*/) {}

using ferry::bench::starpu_check;

Row run_starpu(const Config& c, const char* sched) {
  ferry::bench::start_starpu_on_cpus(sched, 2);

  starpu_codelet independent_cl;
  starpu_codelet_init(&independent_cl);
  independent_cl.where = STARPU_CPU;
  independent_cl.cpu_funcs[0] = starpu_empty;
  independent_cl.nbuffers = 0;
  independent_cl.name = "empty";
  starpu_codelet chain_cl = independent_cl;
  chain_cl.nbuffers = 1;
  chain_cl.modes[0] = STARPU_RW;
  chain_cl.name = "touch";

  double x = 0;
  starpu_data_handle_t handle = nullptr;
  starpu_variable_data_register(&handle, STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(&x), sizeof(x));

  // starpu_task_create + starpu_task_submit: StarPU's cheapest way in
  // (starpu_task_insert parses varargs on top of it).
  auto batch = [&](starpu_codelet* cl, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      starpu_task* t = starpu_task_create();
      t->cl = cl;
      if (cl->nbuffers == 1) t->handles[0] = handle;
      starpu_check(starpu_task_submit(t), "starpu_task_submit");
    }
    starpu_check(starpu_task_wait_for_all(), "starpu_task_wait_for_all");
  };
  Row row{fmt::format("StarPU {}.{} {}", STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, sched),
          "chain: STARPU_RW on one variable", {}, {}};
  row.independent = measure(c, [&](std::size_t n) { batch(&independent_cl, n); });
  row.chain = measure(c, [&](std::size_t n) { batch(&chain_cl, n); });
  starpu_data_unregister(handle);
  starpu_shutdown();
  return row;
}
#endif

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view key) -> std::optional<std::string> {
      if (!a.starts_with(key)) return std::nullopt;
      return std::string(a.substr(key.size()));
    };
    if (auto v = value("--tasks=")) c.tasks = std::stoul(*v);
    else if (auto v = value("--reps=")) c.reps = std::max(1, std::stoi(*v));
    else if (auto v = value("--workers=")) c.workers = static_cast<unsigned>(std::stoul(*v));
    else if (auto v = value("--out=")) c.out = *v;
    else if (auto v = value("--only=")) c.only = *v;
    else throw std::invalid_argument(fmt::format("unknown argument {}", a));
  }
  if (c.tasks == 0) throw std::invalid_argument("--tasks must be positive");
  return c;
}

std::string cell(const std::optional<Series>& s) {
  return s ? fmt::format("{:.3f} / {:.3f}", s->best(), s->median()) : "-";
}

nlohmann::json series_json(const std::optional<Series>& s) {
  if (!s) return nullptr;
  return {{"best_us_per_task", s->best()},
          {"median_us_per_task", s->median()},
          {"runs_us_per_task", s->runs},
          {"heap_allocations_per_task", s->allocations}};
}

// The fastest StarPU scheduler: the peer the ratios are against.
const Series* best_starpu(const std::vector<Row>& rows, std::optional<Series> Row::*which) {
  const Series* best = nullptr;
  for (const auto& r : rows)
    if (r.system.starts_with("StarPU") && r.*which && (best == nullptr || (r.*which)->best() < best->best()))
      best = &*(r.*which);
  return best;
}

std::string verdict(const std::string& what, const Series& ferry, double target_us, const Series* starpu,
                    double target_ratio) {
  std::string line = fmt::format("{:<40} {}  Ferry {:.3f} µs/task, target ≤ {:.1f}", what,
                                 ferry.best() <= target_us ? "PASS" : "MISS", ferry.best(), target_us);
  if (starpu != nullptr) {
    const double ratio = starpu->best() / ferry.best();
    line += fmt::format("; {:.1f}× better than StarPU (target ≥ {:.0f}×: {})", ratio, target_ratio,
                        ratio >= target_ratio ? "met" : "not met");
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  // StarPU reads these at starpu_init; an explicit setting by the user wins.
  ::setenv("STARPU_SILENT", "1", 0);
  ::setenv("STARPU_CALIBRATE", "0", 0);
  ::setenv("STARPU_NCUDA", "0", 0);
  ::setenv("STARPU_NOPENCL", "0", 0);

  auto wanted = [&](std::string_view name) { return c.only.empty() || c.only == name; };
  std::vector<Row> rows;
  // One system at a time, each torn down before the next: Ferry's TBB arena
  // and StarPU's workers must not compete for the two cores.
  if (wanted("ferry")) rows.push_back(run_ferry(c));
  if (wanted("tbb")) rows.push_back(run_tbb(c));
#if FERRY_BENCH_WITH_STARPU
  if (wanted("starpu")) {
    rows.push_back(run_starpu(c, "lws"));
    rows.push_back(run_starpu(c, "dmda"));
  }
#else
  if (wanted("starpu")) rows.push_back(Row{"StarPU", "StarPU: not installed", {}, {}});
#endif

  fmt::print("\nEmpty-task overhead: {} tasks, {} runs (µs per task, submit of the first to wait returning;\n"
             "best / median; ratios and verdicts use the best)\n",
             c.tasks, c.reps);
  fmt::print("{:<26} {:>15} {:>15}   {}\n", "system", "independent", "chain", "notes");
  for (const auto& r : rows)
    fmt::print("{:<26} {:>15} {:>15}   {}\n", r.system, cell(r.independent), cell(r.chain), r.note);
  fmt::print("\nheap allocations per task (malloc, operator new and oneTBB's included; a counted pass)\n");
  for (const auto& r : rows)
    if (r.independent && r.chain)
      fmt::print("  {:<28} independent {:>6.2f}   chain {:>6.2f}\n", r.system, r.independent->allocations,
                 r.chain->allocations);

  const Row* ferry = rows.empty() || !rows.front().system.starts_with("Ferry") ? nullptr : &rows.front();
  nlohmann::json report = {{"benchmark", "task_overhead"},
                           {"git_revision", FERRY_GIT_REVISION},
                           {"machine", ferry::bench::machine()},
                           {"tasks", c.tasks},
                           {"reps", c.reps},
                           {"starpu_installed", FERRY_BENCH_WITH_STARPU != 0},
                           {"systems", nlohmann::json::array()}};
  for (const auto& r : rows) {
    nlohmann::json j = {{"system", r.system},
                        {"note", r.note},
                        {"independent", series_json(r.independent)},
                        {"chain", series_json(r.chain)}};
    if (ferry != nullptr && &r != ferry && r.independent && r.chain) {
      j["ratio_to_ferry"] = {{"independent", r.independent->best() / ferry->independent->best()},
                             {"chain", r.chain->best() / ferry->chain->best()}};
    }
    report["systems"].push_back(std::move(j));
  }

  if (ferry != nullptr) {
    fmt::print("\nratios, peer / Ferry (> 1: Ferry is faster)\n");
    for (const auto& r : rows) {
      if (&r == ferry || !r.independent || !r.chain) continue;
      fmt::print("  {:<28} independent {:>6.2f}   chain {:>6.2f}\n", r.system + " / Ferry",
                 r.independent->best() / ferry->independent->best(), r.chain->best() / ferry->chain->best());
    }
    const std::string v1 = verdict("independent empty task, submit→done", *ferry->independent, target_independent_us,
                                   best_starpu(rows, &Row::independent), 4.0);
    const std::string v2 = verdict("chained tasks with inferred deps", *ferry->chain, target_chain_us,
                                   best_starpu(rows, &Row::chain), 3.0);
    fmt::print("\n{}\n{}\n", v1, v2);
    report["verdicts"] = {
        {"independent", {{"target_us", target_independent_us}, {"pass", ferry->independent->best() <= target_independent_us}}},
        {"chain", {{"target_us", target_chain_us}, {"pass", ferry->chain->best() <= target_chain_us}}}};
  }

  std::ofstream(c.out) << report.dump(2) << '\n';
  fmt::print("\nJSON: {}\n", c.out);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "ferry_bench_tasks: {}\n", e.what());
  return 1;
}
