// METG(50%), the minimum effective task granularity, measured as Task Bench
// measures it (Slaughter et al., SC20): a stencil of `width` points over
// `steps` steps, each task of step t reading its neighbours i-1, i, i+1 of
// step t-1 and writing point i, with a compute-bound kernel whose grain
// (iterations of 24 multiply-adds) is swept from large to small. For each
// grain: wall time of the whole graph, FLOP/s, efficiency against the best
// FLOP/s any system reached at the largest grain, and task granularity =
// wall x cores / tasks. METG(50%) is the granularity where efficiency
// crosses 50 %, interpolated between the two grains around it.
//
// Systems, one at a time on the same cores, the whole round repeated
// --reps times (best wall per grain: other work on the machine only slows):
//   ferry        Ferry's local CPU workers; dependencies inferred from
//                read()/write() as a user writes them, a lambda kernel; two
//                rows of buffers used in turn (Task Bench's program)
//   ferry-fresh  the same with a row of buffers per step (see Layout)
//   starpu       StarPU 1.3, data handles with STARPU_R / STARPU_W (lws, dmda)
//   openmp       OpenMP tasks with depend(in:)/depend(out:) clauses (libgomp)
//   remote-tcp   every task on a loopback ferryd (--remote), the metg_point
//   remote-shm   plugin kernel, over TCP (FERRY_SHARED_MEMORY=0) and over the
//                shared-memory lane, a row per step
//   remote-tcp-pair, remote-shm-pair   the same in two rows (only on request:
//                each task a round trip)
// Beside METG: CPU per task and voluntary context switches per task at the
// smallest grain, for this process and ferryd, which other load moves less.
// Every run's last row is checked against a serial computation; a mismatch
// fails the program (timings are printed, never judged by the exit code).
//
//   ferry_bench_metg [--width=8] [--steps=1000] [--reps=3] [--cores=2]
//     [--grains=32768,...,1 | --max-iterations=32768 --min-iterations=1]
//     [--only=ferry,ferry-fresh,starpu,openmp,remote,remote-tcp,remote-shm,remote-shm-pair] [--starpu=lws,dmda]
//     [--remote=HOST:PORT --token-file=F --plugin=libferry_metg_plugin.so [--ferryd-pid=PID]]
//     [--out=bench-metg.json]
// bench/run_metg_bench.sh starts the ferryd and passes the remote options.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/log.hpp>

#include "args.hpp"
#include "machine.hpp"
#include "process_stats.hpp"
#include "metg_stencil.hpp"

#if FERRY_BENCH_WITH_STARPU
#include "starpu_support.hpp"
#endif

namespace {

using ferry::bench::own_cpu_seconds;
using ferry::bench::own_switches;
using ferry::bench::process_cpu_seconds;
using ferry::bench::process_switches;

namespace metg = ferry::bench::metg;
using Clock = std::chrono::steady_clock;

constexpr double target_metg_us = 5.0;
constexpr double target_vs_starpu = 5.0;
constexpr double target_remote_vs_local = 4.0;

struct Config {
  std::size_t width = 8, steps = 1000;
  long max_iterations = 32768, min_iterations = 1;
  std::vector<long> grains;  // iterations, largest first
  int reps = 3;
  unsigned cores = 2;
  std::vector<std::string> only;  // empty: every system that can run
  std::vector<std::string> starpu = {"lws", "dmda"};
  std::string remote, token_file, plugin, out = "bench-metg.json";
  long ferryd_pid = 0;  // to count ferryd's CPU per task

  // The remote rows in the pair layout (each task a round trip, ~10 s a
  // round) run only when --only names them.
  bool wanted(const std::string& system) const {
    if (only.empty()) return !system.ends_with("-pair");
    return std::ranges::find(only, system) != only.end() ||
           (system.starts_with("remote") && !system.ends_with("-pair") && std::ranges::find(only, "remote") != only.end());
  }
  std::size_t tasks() const { return width * steps; }
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const char* key) { return ferry::bench::option(a, key); };
    if (auto v = value("--width=")) c.width = std::stoul(*v);
    else if (auto v = value("--steps=")) c.steps = std::stoul(*v);
    else if (auto v = value("--reps=")) c.reps = std::max(1, std::stoi(*v));
    else if (auto v = value("--cores=")) c.cores = static_cast<unsigned>(std::stoul(*v));
    else if (auto v = value("--grains=")) c.grains = ferry::bench::list<long>(*v);
    else if (auto v = value("--max-iterations=")) c.max_iterations = std::stol(*v);
    else if (auto v = value("--min-iterations=")) c.min_iterations = std::stol(*v);
    else if (auto v = value("--only=")) c.only = ferry::bench::words(*v);
    else if (auto v = value("--starpu=")) c.starpu = ferry::bench::words(*v);
    else if (auto v = value("--remote=")) c.remote = *v;
    else if (auto v = value("--token-file=")) c.token_file = *v;
    else if (auto v = value("--plugin=")) c.plugin = *v;
    else if (auto v = value("--ferryd-pid=")) c.ferryd_pid = std::stol(*v);
    else if (auto v = value("--out=")) c.out = *v;
    else throw std::invalid_argument("unknown argument " + a + " (see the top of metg_bench.cpp)");
  }
  if (c.width == 0 || c.steps == 0 || c.cores == 0) throw std::invalid_argument("--width, --steps and --cores must be positive");
  if (c.grains.empty())
    for (long g = c.max_iterations; g >= std::max(1L, c.min_iterations); g /= 2) c.grains.push_back(g);
  std::ranges::sort(c.grains, std::greater<>());
  if (c.grains.empty() || c.grains.back() < 0) throw std::invalid_argument("grains must be non-negative iterations");
  if (!c.remote.empty() && (c.token_file.empty() || c.plugin.empty()))
    throw std::invalid_argument("--remote needs --token-file and --plugin (the ferryd must load the same plugin)");
  return c;
}

// One system, set up once per round: run() executes the whole stencil graph
// at one grain and returns when every task has finished; row() gives the
// last step's points for the check.
class Stencil {
 public:
  virtual ~Stencil() = default;
  virtual void run(long iterations) = 0;
  virtual std::vector<double> row() = 0;
  // What a reader needs to judge the row besides its times (empty: nothing).
  virtual std::string note() const { return {}; }

  // The last run: its graph's wall time, submission to the last task's end,
  // and the CPU this process (and ferryd, when one runs the tasks) spent
  // meanwhile, per task. CPU per task does not move with other load on the
  // machine as the wall time does; at the smallest grain it is the
  // runtime's own cost, idle workers' spinning included.
  double seconds = 0, cpu_us = 0, ferryd_cpu_us = -1;
  double switches = 0, ferryd_switches = -1;  // voluntary context switches per task
  long iterations = 0;

 protected:
  // Brackets the timed part of run().
  class Stopwatch {
   public:
    Stopwatch(Stencil& s, long iterations, std::size_t tasks, long ferryd_pid = 0)
        : s_(s), iterations_(iterations), tasks_(tasks), ferryd_pid_(ferryd_pid),
          cpu_(own_cpu_seconds()), ferryd_cpu_(process_cpu_seconds(ferryd_pid)), switches_(own_switches()),
          ferryd_switches_(process_switches(ferryd_pid)) {}
    void stop() {
      s_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
      const double per_task = 1e6 / static_cast<double>(tasks_);
      s_.cpu_us = (own_cpu_seconds() - cpu_) * per_task;
      const double ferryd_after = process_cpu_seconds(ferryd_pid_);
      s_.ferryd_cpu_us = ferryd_cpu_ >= 0 && ferryd_after >= 0 ? (ferryd_after - ferryd_cpu_) * per_task : -1;
      s_.switches = static_cast<double>(own_switches() - switches_) / static_cast<double>(tasks_);
      const long ferryd_switches_after = process_switches(ferryd_pid_);
      s_.ferryd_switches = ferryd_switches_ >= 0 && ferryd_switches_after >= 0
                               ? static_cast<double>(ferryd_switches_after - ferryd_switches_) / static_cast<double>(tasks_)
                               : -1;
      s_.iterations = iterations_;
    }

   private:
    Stencil& s_;
    long iterations_;
    std::size_t tasks_;
    long ferryd_pid_;
    double cpu_, ferryd_cpu_;
    long switches_, ferryd_switches_;
    Clock::time_point start_ = Clock::now();
  };
};

// A system's last row differed from the serial computation's.
struct WrongResult : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- Ferry, local or on a remote -------------------------------------------

// How a Ferry program keeps the stencil's points:
//   pair:  two rows of buffers, step t reading one and writing the other, as
//          Task Bench's implementations and most iterative codes do;
//   fresh: a row of buffers per step, each written once per run.
// A remote forwards a task behind its predecessors (the graph then runs
// there without a round trip per task) only when every buffer it uses
// already has its one copy there, and when it overwrites no input that a
// copy still only on the remote was computed from (docs/architecture.md,
// remote chains). The pair layout overwrites such an input at every step,
// so its tasks go one round trip at a time; the fresh layout's rows are
// put on the remote once, and brought home between runs (off the clock),
// which cuts the lineage the next run's writes would otherwise wait on.
enum class Layout { pair, fresh };

class FerryStencil final : public Stencil {
 public:
  // `remote`: every task and the buffers' first values on that ferryd,
  // with the plugin's kernel; otherwise the CPU workers and a lambda kernel.
  FerryStencil(const Config& c, bool remote, Layout layout) : c_(c), layout_(layout) {
    ferry::Runtime::Options o;
    o.workers = c.cores;
    o.persist_perf_models = false;
    o.read_environment = false;  // FERRY_SHARED_MEMORY is still read when dialling
    o.gpus = "none";
    if (remote) {
      o.remotes = {c.remote};
      o.token_file = c.token_file;
    }
    rt_ = std::make_unique<ferry::Runtime>(o);
    if (remote) {
      rt_->load_plugin(c.plugin);
      kernel_ = rt_->find_kernel("metg_point");
      place_ = ferry::remote(c.remote);
    } else {
      kernel_ = rt_->kernel(
          "metg_point",
          [](ferry::In<double> left, ferry::In<double> mid, ferry::In<double> right, ferry::Out<double> out,
             long iterations) { metg::point(iterations, left.data(), mid.data(), right.data(), out.data()); },
          [](const ferry::KernelArgs& args) {
            return ferry::Cost{static_cast<double>(args.integer(4)) * metg::flops_per_iteration, 64};
          });
      place_ = ferry::cpu();
    }
    rows_.resize(layout == Layout::pair ? 2 : c.steps + 1);
    for (auto& row : rows_) {
      row = make_row();
      for (auto& b : row) rt_->submit("fill", ferry::write(b), 0.0, ferry::on(place_));
    }
    rt_->wait();
    fills_ += rows_.size() * c.width;
  }

  void run(long iterations) override {
    // Off the clock: the last run's rows home (see Layout), then the
    // starting values written where the tasks run, so that on a remote the
    // graph begins with its data in place, as after an earlier phase of a
    // program.
    if (layout_ == Layout::fresh && place_.kind == ferry::Place::Kind::remote)
      for (std::size_t t = 1; t < rows_.size(); ++t)
        for (const auto& b : rows_[t]) (void)b.host_read();
    for (std::size_t i = 0; i < c_.width; ++i)
      rt_->submit("fill", ferry::write(rows_[0][i]), metg::initial(i), ferry::on(place_));
    rt_->wait();
    fills_ += c_.width;
    Stopwatch clock(*this, iterations, c_.tasks(), remote() ? c_.ferryd_pid : 0);
    for (std::size_t t = 0; t < c_.steps; ++t) {
      const auto& before = rows_[t % rows_.size()];
      auto& after = rows_[(t + 1) % rows_.size()];
      for (std::size_t i = 0; i < c_.width; ++i) {
        const std::size_t l = i == 0 ? i : i - 1, r = i + 1 == c_.width ? i : i + 1;
        rt_->submit(kernel_, ferry::read(before[l]), ferry::read(before[i]), ferry::read(before[r]),
                    ferry::write(after[i]), iterations, ferry::on(place_));
      }
    }
    rt_->wait();
    clock.stop();
    tasks_ += c_.tasks();
  }

  // Whether the graph went out as it was submitted: a task held back until
  // its predecessors finished costs a round trip.
  std::string note() const override {
    if (!remote()) return {};
    const auto s = rt_->remote_stats(c_.remote);
    return fmt::format("{} of {} tasks forwarded behind their predecessors, {} lineage checkpoints, "
                       "link latency at connect {:.1f} µs",
                       s.tasks_forwarded, tasks_ + fills_, s.lineage_checkpoints, s.latency_seconds * 1e6);
  }

  std::vector<double> row() override {
    std::vector<double> out;
    for (const auto& b : rows_[c_.steps % rows_.size()]) {
      const auto h = b.host_read();
      out.insert(out.end(), h.data(), h.data() + metg::values_per_point);
    }
    return out;
  }

 private:
  bool remote() const { return place_.kind == ferry::Place::Kind::remote; }

  std::vector<ferry::Buffer<double>> make_row() {
    std::vector<ferry::Buffer<double>> row;
    for (std::size_t i = 0; i < c_.width; ++i) row.push_back(rt_->buffer<double>(metg::values_per_point));
    return row;
  }

  const Config& c_;
  Layout layout_;
  std::unique_ptr<ferry::Runtime> rt_;
  ferry::KernelRef kernel_;
  ferry::Place place_;
  std::size_t tasks_ = 0, fills_ = 0;
  std::vector<std::vector<ferry::Buffer<double>>> rows_;  // step t reads rows_[t % size], writes the next
};

// ---- StarPU ----------------------------------------------------------------

#if FERRY_BENCH_WITH_STARPU
using ferry::bench::starpu_check;

// What a task needs besides its buffers: the grain, and which neighbours
// exist (an edge point's task has two inputs, as in Task Bench).
struct StarpuPoint {
  long iterations = 0;
  bool left = false, right = false;
};

// buffers: out, [left], mid, [right]
void starpu_point(void** buffers, void* arg) {
  const auto* p = static_cast<const StarpuPoint*>(arg);
  const auto at = [&](unsigned k) { return reinterpret_cast<double*>(STARPU_VECTOR_GET_PTR(buffers[k])); };
  const unsigned m = p->left ? 2 : 1;
  const double* mid = at(m);
  metg::point(p->iterations, p->left ? at(1) : mid, mid, p->right ? at(m + 1) : mid, at(0));
}

class StarpuStencil final : public Stencil {
 public:
  StarpuStencil(const Config& c, const std::string& sched) : c_(c), args_(c.width), data_(2 * c.width * metg::values_per_point) {
    ferry::bench::start_starpu_on_cpus(sched.c_str(), static_cast<int>(c.cores));
    starpu_codelet_init(&cl_);
    cl_.where = STARPU_CPU;
    cl_.cpu_funcs[0] = starpu_point;
    cl_.nbuffers = STARPU_VARIABLE_NBUFFERS;
    cl_.name = "metg_point";
    for (std::size_t i = 0; i < c.width; ++i) args_[i] = {0, i > 0, i + 1 < c.width};
    for (std::size_t g = 0; g < 2; ++g)
      for (std::size_t i = 0; i < c.width; ++i) {
        starpu_data_handle_t h = nullptr;
        starpu_vector_data_register(&h, STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(value(g, i)),
                                    metg::values_per_point, sizeof(double));
        handles_[g].push_back(h);
      }
  }
  ~StarpuStencil() override {
    for (auto& g : handles_)
      for (auto h : g) starpu_data_unregister(h);
    starpu_shutdown();
  }

  void run(long iterations) override {
    for (std::size_t i = 0; i < c_.width; ++i) {
      starpu_check(starpu_data_acquire(handles_[0][i], STARPU_W), "starpu_data_acquire");
      value(0, i)[0] = value(0, i)[1] = metg::initial(i);
      starpu_data_release(handles_[0][i]);
      args_[i].iterations = iterations;
    }
    Stopwatch clock(*this, iterations, c_.tasks());
    for (std::size_t t = 0; t < c_.steps; ++t) {
      const auto& before = handles_[t % 2];
      const auto& after = handles_[(t + 1) % 2];
      for (std::size_t i = 0; i < c_.width; ++i) {
        // starpu_task_create + submit: StarPU's cheapest way in (task_insert parses varargs on top).
        starpu_task* task = starpu_task_create();
        task->cl = &cl_;
        task->cl_arg = &args_[i];
        int n = 0;
        const auto add = [&](starpu_data_handle_t h, starpu_data_access_mode mode) {
          task->handles[n] = h;
          task->modes[n++] = mode;
        };
        add(after[i], STARPU_W);
        if (args_[i].left) add(before[i - 1], STARPU_R);
        add(before[i], STARPU_R);
        if (args_[i].right) add(before[i + 1], STARPU_R);
        task->nbuffers = n;
        starpu_check(starpu_task_submit(task), "starpu_task_submit");
      }
    }
    starpu_check(starpu_task_wait_for_all(), "starpu_task_wait_for_all");
    clock.stop();
  }

  std::vector<double> row() override {
    std::vector<double> out;
    for (std::size_t i = 0; i < c_.width; ++i) {
      starpu_check(starpu_data_acquire(handles_[c_.steps % 2][i], STARPU_R), "starpu_data_acquire");
      out.insert(out.end(), value(c_.steps % 2, i), value(c_.steps % 2, i) + metg::values_per_point);
      starpu_data_release(handles_[c_.steps % 2][i]);
    }
    return out;
  }

 private:
  double* value(std::size_t g, std::size_t i) { return &data_[(g * c_.width + i) * metg::values_per_point]; }

  const Config& c_;
  starpu_codelet cl_{};
  std::vector<StarpuPoint> args_;
  std::vector<double> data_;
  std::vector<starpu_data_handle_t> handles_[2];
};
#endif

// ---- OpenMP tasks ----------------------------------------------------------

class OpenmpStencil final : public Stencil {
 public:
  explicit OpenmpStencil(const Config& c) : c_(c), data_(2 * c.width * metg::values_per_point) {}

  void run(long iterations) override {
    for (std::size_t i = 0; i < c_.width; ++i) value(0, i)[0] = value(0, i)[1] = metg::initial(i);
    Stopwatch clock(*this, iterations, c_.tasks());
    const std::size_t width = c_.width, steps = c_.steps;
    // One thread creates the tasks (Task Bench's OpenMP version does the
    // same); the team runs them, the creator too when the queue is full.
#pragma omp parallel num_threads(static_cast<int>(c_.cores))
#pragma omp single
    for (std::size_t t = 0; t < steps; ++t) {
      for (std::size_t i = 0; i < width; ++i) {
        const double* mid = value(t % 2, i);
        const double* left = i == 0 ? mid : value(t % 2, i - 1);
        const double* right = i + 1 == width ? mid : value(t % 2, i + 1);
        double* out = value((t + 1) % 2, i);
#pragma omp task firstprivate(left, mid, right, out, iterations) depend(in : left[0], mid[0], right[0]) depend(out : out[0])
        metg::point(iterations, left, mid, right, out);
      }
    }
    clock.stop();
  }

  std::vector<double> row() override {
    const double* last = value(c_.steps % 2, 0);
    return {last, last + c_.width * metg::values_per_point};
  }

 private:
  double* value(std::size_t g, std::size_t i) { return &data_[(g * c_.width + i) * metg::values_per_point]; }

  const Config& c_;
  std::vector<double> data_;
};

// ---- the sweep -------------------------------------------------------------

struct System {
  std::string key, name;
  std::function<std::unique_ptr<Stencil>()> make;
  std::vector<std::vector<double>> runs;  // per grain, seconds of each round
  std::string note;                       // the last round's
  // Each round's CPU per task at the smallest grain (its last run): this process's, ferryd's (-1: none).
  std::vector<double> cpu_us, ferryd_cpu_us;
  std::vector<double> switches, ferryd_switches;  // voluntary context switches per task, the same runs
  double best(std::size_t grain) const {
    return runs[grain].empty() ? 0.0 : *std::ranges::min_element(runs[grain]);
  }
};

// The last row each grain must give, computed once.
struct Expected {
  std::vector<std::vector<double>> rows;
  explicit Expected(const Config& c) {
    for (long g : c.grains) rows.push_back(metg::serial(c.width, c.steps, g));
  }
};

// One round of one system: every grain once, largest first, each result checked.
void round(const Config& c, const Expected& expected, System& s) {
  s.runs.resize(c.grains.size());
  auto stencil = s.make();
  stencil->run(c.grains.back());  // threads started, pools grown, a remote connected and warm
  for (std::size_t g = 0; g < c.grains.size(); ++g) {
    stencil->run(c.grains[g]);
    s.runs[g].push_back(stencil->seconds);
    if (stencil->row() != expected.rows[g])
      throw WrongResult(fmt::format("{}: the last row at {} iterations differs from the serial computation",
                                           s.name, c.grains[g]));
  }
  s.note = stencil->note();
  s.cpu_us.push_back(stencil->cpu_us);
  s.ferryd_cpu_us.push_back(stencil->ferryd_cpu_us);
  s.switches.push_back(stencil->switches);
  s.ferryd_switches.push_back(stencil->ferryd_switches);
}

volatile double kernel_sink;  // keeps the timed calls

// Seconds of one kernel call alone at each grain, on one core: what a task's
// work costs with no runtime around it.
std::vector<double> kernel_seconds(const Config& c) {
  std::vector<double> out;
  for (long g : c.grains) {
    double best = 1e300;
    for (int r = 0; r < 5; ++r) {
      const int calls = static_cast<int>(std::clamp(200000L / std::max(g, 1L), 5L, 20000L));
      const auto start = Clock::now();
      for (int k = 0; k < calls; ++k) kernel_sink = metg::burn(g, k);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / calls);
    }
    out.push_back(best);
  }
  return out;
}

struct Metg {
  double us = 0;         // granularity at 50 % efficiency
  bool bounded = true;   // false: every grain stayed above 50 %, us is the smallest measured (an upper bound)
  bool found = false;    // false: not even the largest grain reached 50 %
};

Metg metg_50(const std::vector<double>& granularity_us, const std::vector<double>& efficiency) {
  Metg m;
  if (efficiency.empty() || efficiency[0] < 0.5) return m;
  m.found = true;
  for (std::size_t g = 1; g < efficiency.size(); ++g) {
    if (efficiency[g] >= 0.5) continue;
    // Linear in log(granularity) between the last grain above 50 % and the first below.
    const double e0 = efficiency[g - 1], e1 = efficiency[g];
    const double l0 = std::log(granularity_us[g - 1]), l1 = std::log(granularity_us[g]);
    m.us = std::exp(l0 + (l1 - l0) * (e0 - 0.5) / (e0 - e1));
    return m;
  }
  m.bounded = false;
  m.us = granularity_us.back();
  return m;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, cc;
  f >> a >> b >> cc;
  return fmt::format("{} {} {}", a, b, cc);
}

std::string metg_text(const Metg& m) {
  if (!m.found) return "-";
  return fmt::format("{}{:.2f} µs", m.bounded ? "" : "< ", m.us);
}

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  if (!std::getenv("FERRY_LOG")) ferry::log().set_level(spdlog::level::warn);
  ::setenv("STARPU_SILENT", "1", 0);
  ::setenv("STARPU_CALIBRATE", "0", 0);
  ::setenv("STARPU_NCUDA", "0", 0);
  ::setenv("STARPU_NOPENCL", "0", 0);

  std::vector<System> systems;
  const auto add = [&](std::string key, std::string name, std::function<std::unique_ptr<Stencil>()> make) {
    System s;
    s.key = std::move(key);
    s.name = std::move(name);
    s.make = std::move(make);
    systems.push_back(std::move(s));
  };
  if (c.wanted("ferry"))
    add("ferry", fmt::format("Ferry local ({} workers)", c.cores),
        [&c] { return std::make_unique<FerryStencil>(c, false, Layout::pair); });
  if (c.wanted("ferry-fresh"))
    add("ferry-fresh", "Ferry local, fresh rows",
        [&c] { return std::make_unique<FerryStencil>(c, false, Layout::fresh); });
#if FERRY_BENCH_WITH_STARPU
  if (c.wanted("starpu"))
    for (const auto& sched : c.starpu)
      add("starpu-" + sched, fmt::format("StarPU {}.{} {}", STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, sched),
          [&c, sched] { return std::make_unique<StarpuStencil>(c, sched); });
#else
  if (c.wanted("starpu")) fmt::print("StarPU: not installed (libstarpu-dev), its rows are left out\n");
#endif
  if (c.wanted("openmp"))
    add("openmp",
        fmt::format("OpenMP tasks ({} threads, {})", c.cores,
                    std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "default wait"),
        [&c] { return std::make_unique<OpenmpStencil>(c); });
  // The lane is chosen when the runtime dials, from FERRY_SHARED_MEMORY.
  const auto remote = [&c](bool shared_memory, Layout layout) {
    if (shared_memory) ::unsetenv("FERRY_SHARED_MEMORY");
    else ::setenv("FERRY_SHARED_MEMORY", "0", 1);
    return std::make_unique<FerryStencil>(c, true, layout);
  };
  for (const bool shm : {false, true})
    for (const Layout layout : {Layout::fresh, Layout::pair}) {
      const std::string key = fmt::format("remote-{}{}", shm ? "shm" : "tcp", layout == Layout::pair ? "-pair" : "");
      if (c.remote.empty() || !c.wanted(key)) continue;
      add(key, fmt::format("Ferry remote, {}{}", shm ? "shared memory" : "TCP", layout == Layout::pair ? ", pair rows" : ""),
          [remote, shm, layout] { return remote(shm, layout); });
    }
  if (c.remote.empty() && !c.only.empty() && (c.wanted("remote-tcp") || c.wanted("remote-shm"))) {
    throw std::invalid_argument("the remote rows need --remote (bench/run_metg_bench.sh starts a ferryd)");
  }

  fmt::print("METG: stencil width {} x {} steps ({} tasks per run), {} grains {}..{} iterations, {} rounds, {} cores\n",
             c.width, c.steps, c.tasks(), c.grains.size(), c.grains.front(), c.grains.back(), c.reps, c.cores);
  fmt::print("load average at start: {} ({} CPUs)\n", load_average(), ::sysconf(_SC_NPROCESSORS_ONLN));
  const Expected expected(c);
  const std::vector<double> kernel_s = kernel_seconds(c);
  const double busy_before = ferry::bench::busy_core_seconds();
  const auto wall_before = Clock::now();
  // Round after round rather than system after system: a stretch of other
  // load on the machine then slows one round of every system, not all of one.
  for (int r = 0; r < c.reps; ++r)
    for (auto& s : systems) round(c, expected, s);
  const double wall_s = std::chrono::duration<double>(Clock::now() - wall_before).count();
  const double busy_s = ferry::bench::busy_core_seconds() - busy_before;
  if (systems.empty()) throw std::invalid_argument("--only names no system that can run here");

  // Efficiency is against the best FLOP/s at the largest grain of all systems.
  const double flops_per_run = static_cast<double>(c.tasks()) * metg::flops_per_iteration;
  double peak = 0;
  for (const auto& s : systems) peak = std::max(peak, flops_per_run * static_cast<double>(c.grains[0]) / s.best(0));
  fmt::print("peak: {:.2f} GFLOP/s at {} iterations (best of all systems); one core alone: {:.2f} GFLOP/s\n",
             peak / 1e9, c.grains[0], metg::flops_per_iteration * static_cast<double>(c.grains[0]) / kernel_s[0] / 1e9);
  fmt::print("\nper grain: task granularity (wall x {} cores / tasks, µs) and efficiency; best of {} rounds\n", c.cores,
             c.reps);
  fmt::print("{:>10} {:>10}", "iterations", "kernel µs");
  for (const auto& s : systems) fmt::print(" {:>17}", s.key);
  fmt::print("\n");

  nlohmann::json report = {{"benchmark", "metg"},
                           {"git_revision", FERRY_GIT_REVISION},
                           {"machine", ferry::bench::machine()},
                           {"width", c.width},
                           {"steps", c.steps},
                           {"cores", c.cores},
                           {"reps", c.reps},
                           {"grains", c.grains},
                           {"kernel_us", nlohmann::json::array()},
                           {"peak_gflops", peak / 1e9},
                           {"busy_core_fraction", wall_s > 0 ? busy_s / wall_s / c.cores : 0},
                           {"systems", nlohmann::json::array()}};
  std::vector<std::vector<double>> granularity(systems.size()), efficiency(systems.size());
  for (std::size_t g = 0; g < c.grains.size(); ++g) {
    fmt::print("{:>10} {:>10.2f}", c.grains[g], kernel_s[g] * 1e6);
    report["kernel_us"].push_back(kernel_s[g] * 1e6);
    for (std::size_t k = 0; k < systems.size(); ++k) {
      const double wall = systems[k].best(g);
      granularity[k].push_back(wall * c.cores / static_cast<double>(c.tasks()) * 1e6);
      efficiency[k].push_back(flops_per_run * static_cast<double>(c.grains[g]) / wall / peak);
      fmt::print(" {:>9.2f} {:>6.1f}%", granularity[k].back(), 100 * efficiency[k].back());
    }
    fmt::print("\n");
  }

  fmt::print("\n{:<36} {:>12}   at {} iterations, least of the rounds: CPU µs per task; voluntary context "
             "switches per task\n",
             "METG(50%)", "", c.grains.back());
  std::vector<Metg> metgs;
  for (std::size_t k = 0; k < systems.size(); ++k) {
    metgs.push_back(metg_50(granularity[k], efficiency[k]));
    const double cpu = *std::ranges::min_element(systems[k].cpu_us);
    const double ferryd_cpu = *std::ranges::min_element(systems[k].ferryd_cpu_us);
    const double switches = *std::ranges::min_element(systems[k].switches);
    const double ferryd_switches = *std::ranges::min_element(systems[k].ferryd_switches);
    std::string cpu_text = fmt::format("{:.2f}", cpu);
    if (ferryd_cpu >= 0) cpu_text += fmt::format(" + ferryd {:.2f}", ferryd_cpu);
    std::string switch_text = fmt::format("{:.2f}", switches);
    if (ferryd_switches >= 0) switch_text += fmt::format(" + ferryd {:.2f}", ferryd_switches);
    fmt::print("  {:<34} {:>12}   {:<22} {:<20}{}\n", systems[k].name, metg_text(metgs.back()), cpu_text, switch_text,
               systems[k].note.empty() ? "" : "  (" + systems[k].note + ")");
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : systems[k].runs) runs.push_back(r);
    report["systems"].push_back({{"key", systems[k].key},
                                 {"system", systems[k].name},
                                 {"metg_us", metgs.back().found ? nlohmann::json(metgs.back().us) : nlohmann::json()},
                                 {"metg_bounded", metgs.back().bounded},
                                 {"granularity_us", granularity[k]},
                                 {"efficiency", efficiency[k]},
                                 {"runs_seconds", runs},
                                 {"note", systems[k].note},
                                 {"cpu_us_per_task_smallest_grain", cpu},
                                 {"ferryd_cpu_us_per_task_smallest_grain", ferryd_cpu},
                                 {"switches_per_task_smallest_grain", switches},
                                 {"ferryd_switches_per_task_smallest_grain", ferryd_switches}});
  }

  // A key names one system; "starpu" the best of its schedulers.
  const auto find = [&](const std::string& key) -> const Metg* {
    const Metg* best = nullptr;
    for (std::size_t k = 0; k < systems.size(); ++k)
      if ((systems[k].key == key || (key == "starpu" && systems[k].key.starts_with("starpu-"))) && metgs[k].found &&
          (best == nullptr || metgs[k].us < best->us))
        best = &metgs[k];
    return best;
  };
  // The headline is the pair layout, the program Task Bench's
  // implementations (and the external figures) run.
  const Metg* ferry = find("ferry");
  const Metg* fresh = find("ferry-fresh");
  const Metg* starpu = find("starpu");
  nlohmann::json verdicts = nlohmann::json::object();
  fmt::print("\n");
  if (ferry != nullptr) {
    fmt::print("Ferry local METG(50%) {:.2f} µs, target ≤ {:.0f} µs: {}\n", ferry->us, target_metg_us,
               ferry->us <= target_metg_us ? "met" : "not met");
    verdicts["ferry_metg"] = {{"us", ferry->us}, {"target_us", target_metg_us}, {"met", ferry->us <= target_metg_us}};
    if (starpu != nullptr) {
      const double ratio = starpu->us / ferry->us;
      fmt::print("StarPU (best scheduler) / Ferry: {:.2f}x, target ≥ {:.0f}x: {}\n", ratio, target_vs_starpu,
                 ratio >= target_vs_starpu ? "met" : "not met");
      verdicts["starpu_over_ferry"] = {{"ratio", ratio}, {"target", target_vs_starpu}, {"met", ratio >= target_vs_starpu}};
    }
    if (const Metg* omp = find("openmp")) fmt::print("OpenMP / Ferry: {:.2f}x\n", omp->us / ferry->us);
    if (fresh != nullptr) fmt::print("Ferry fresh rows / pair rows, both local: {:.2f}x\n", fresh->us / ferry->us);
  }
  // Remote against local in the same layout: the same program, only placed elsewhere.
  for (const char* lane : {"remote-tcp", "remote-shm", "remote-tcp-pair", "remote-shm-pair"}) {
    const Metg* r = find(lane);
    const Metg* local = std::string_view(lane).ends_with("-pair") ? ferry : fresh;
    if (r == nullptr || local == nullptr) continue;
    const double ratio = r->us / local->us;
    fmt::print("{} / Ferry local ({} rows): {:.2f}x ({:.2f} µs against {:.2f}), target ≤ {:.0f}x: {}\n", lane,
               local == ferry ? "pair" : "fresh", ratio, r->us, local->us, target_remote_vs_local,
               ratio <= target_remote_vs_local ? "met" : "not met");
    verdicts[lane] = {{"ratio", ratio}, {"us", r->us}, {"local_us", local->us}, {"target", target_remote_vs_local},
                      {"met", ratio <= target_remote_vs_local}};
  }
  report["verdicts"] = verdicts;
  fmt::print("load average at end: {}; the machine's cores were {:.0f}% busy during the rounds\n", load_average(),
             wall_s > 0 ? 100 * busy_s / wall_s / ::sysconf(_SC_NPROCESSORS_ONLN) : 0.0);
  std::ofstream(c.out) << report.dump(2) << '\n';
  fmt::print("JSON: {}\n", c.out);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "ferry_bench_metg: {}\n", e.what());
  return 1;
}
