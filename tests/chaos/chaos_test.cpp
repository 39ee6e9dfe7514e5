// The chaos harness: a pool of three loopback ferryd runs the mixed DAG
// (mixed_dag.hpp) again and again while a fault injector, at a random
// point of each run, kills a host (-9), stops one (SIGSTOP) for longer
// than the liveness limit and resumes it, kills one and restarts it on
// the same port, or fills one to its memory limit from another client. Asserted: every run's outputs equal, bit for bit, those
// of the same graph on the CPU alone; no run outlives its bound (a hang
// fails the harness, naming the run and its fault); a stopped host that
// comes back is used again or retired, never half-trusted (a task pinned
// to it either runs there and is right, or runs elsewhere). Printed, not
// asserted (timings depend on the machine): how long each fault took to be
// noticed (the distribution), and each run's makespan beside the
// fault-free one.
//
//   chaos_test [--runs N] [--seed S] [--faults kill,stop,restart,fill,partition]
//              [--liveness-ms MS] [--bound-s S] [--netns] [--host-to-host 0]
//              [--parts cholesky,chain,edges,chunked,numpy] [--lane-kills N]
//
// --lane-kills N: the same-host shared-memory lane (docs/protocol.md) with
// a ferryd killed -9 N times while 32 MiB payloads are in flight on it
// (Chaos.SharedMemoryLaneSurvivesKills): a kill that wedged the client's
// UCX worker would hang the run, which the bound turns into a failure.
//
// ctest runs a bounded form (a few runs of each fault); by hand, --runs 200.
// --netns: each ferryd in a network namespace of its own behind a shaped
// link (tests/integration/pool_hosts.sh --hosts-only runs this inside its
// client namespace), and one more fault, a partition: nftables drops
// everything on the host's link, then lets it through again.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"
#include "mixed_dag.hpp"
#include "numpy_client.hpp"
#include "test_client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using ferry::test::FerrydProcess;
using namespace std::chrono_literals;

struct Args {
  int runs = 9;
  std::uint64_t seed = 0;  // 0: from the clock (printed, so a failure can be replayed)
  std::vector<std::string> faults{"kill", "stop", "restart", "fill"};
  bool netns = false;
  bool host_to_host = true;
  int lane_kills = 0;  // --lane-kills N: Chaos.SharedMemoryLaneSurvivesKills's kills
  // --parts cholesky,chain,edges,chunked,numpy: which parts of the DAG run
  // (numpy: numpy_pipeline.py in a Python process of its own, beside it).
  ferry::chaos::Shape shape;
  bool numpy = true;
  std::chrono::milliseconds liveness{1000};
  std::chrono::seconds bound{90};  // one run, fault and recovery included
};
Args args;

// The run under way, for the fatal-signal handler: a crash in CI leaves
// only this process's output to go by.
std::atomic<int> current_run{-1};

extern "C" void on_fatal_signal(int sig) {
  char line[96];
  const int n = std::snprintf(line, sizeof line, "chaos_test: fatal signal %d (%s) in run %d; backtrace:\n", sig,
                              sigdescr_np(sig), current_run.load());
  if (n > 0) (void)!::write(STDERR_FILENO, line, static_cast<std::size_t>(n));
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<std::string> words(const char* text) {
  std::vector<std::string> out;
  std::stringstream in(text != nullptr ? text : "");
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The namespace variant's hosts, as pool_hosts.sh --hosts-only made them.
struct Namespaces {
  std::vector<std::string> hosts, names, devices;
  static Namespaces from_environment() {
    return {words(std::getenv("FERRY_POOL_HOSTS")), words(std::getenv("FERRY_POOL_NAMESPACES")),
            words(std::getenv("FERRY_POOL_DEVICES"))};
  }
};

// The pool's processes and the ferry.numpy client, for a harness stopped by
// hand (Ctrl-C, a CI timeout): a ferryd left behind would keep its port, or
// stay stopped.
// (One being restarted at that moment is not listed yet, and is left.)
std::array<std::atomic<pid_t>, 4> pool_pids{};

extern "C" void kill_pool_and_exit(int signo) {
  for (auto& pid : pool_pids)
    if (const pid_t p = pid.load(); p > 0) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
    }
  ::_exit(128 + signo);
}

// Three ferryd on fixed ports, so that one restarted is where it was; with
// namespaces, each in its own (netns_ferryd.sh starts it there).
class Pool {
 public:
  enum class State { up, dead, stopped, partitioned };

  Pool(std::size_t n, std::optional<Namespaces> ns) : ns_(std::move(ns)) {
    if (ns_) {
      ::setenv("FERRY_TEST_FERRYD", CHAOS_NETNS_FERRYD, 1);
      ::setenv("FERRY_CHAOS_FERRYD", FERRYD_PATH, 1);
    }
    std::set<std::uint16_t> ports;
    while (hosts_.size() < n) {
      const auto port = ferry::test::stable_port();
      if (!ports.insert(port).second) continue;
      // A memory limit another client can fill (the `fill` fault) and the
      // run's own data nearly does (its largest buffers are 32 MiB).
      std::vector<std::string> extra{"--memory-limit", "160MiB"};
      if (ns_) extra.insert(extra.end(), {"--listen", ns_->hosts.at(hosts_.size()) + ":" + std::to_string(port)});
      hosts_.push_back(std::make_unique<FerrydProcess>(extra, FerrydProcess::default_token, port));
      states_.push_back(State::up);
      note_pid(hosts_.size() - 1);
    }
    ::signal(SIGINT, kill_pool_and_exit);
    ::signal(SIGTERM, kill_pool_and_exit);
    // A ferry.numpy client that died makes its run fail (NumpyClient says
    // so), not the harness end on a write to its pipe, leaving the pool.
    ::signal(SIGPIPE, SIG_IGN);
  }
  ~Pool() {
    for (std::size_t i = 0; i < hosts_.size(); ++i)
      if (states_[i] == State::partitioned) reconnect(i);
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  std::size_t size() const { return hosts_.size(); }
  FerrydProcess& host(std::size_t i) { return *hosts_[i]; }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const auto& h : hosts_) out.push_back(h->address());
    return out;
  }

  void kill(std::size_t i) {
    hosts_[i]->stop(SIGKILL);
    states_[i] = State::dead;
  }
  void stop(std::size_t i) {
    hosts_[i]->signal(SIGSTOP);
    states_[i] = State::stopped;
  }
  void resume(std::size_t i) {
    hosts_[i]->signal(SIGCONT);
    states_[i] = State::up;
  }
  void restart(std::size_t i) {
    hosts_[i]->restart();
    states_[i] = State::up;
    note_pid(i);
  }
  // Everything on the host's link dropped, both ways, at its end: the
  // process runs, its TCP connections stay open, nothing gets through.
  void partition(std::size_t i) {
    const std::string dev = ns_->devices.at(i);
    const int rc = shell("ip netns exec " + ns_->names.at(i) + " nft 'add table inet chaos_partition; " +
                         "add chain inet chaos_partition input { type filter hook input priority -10; policy accept; }; " +
                         "add chain inet chaos_partition output { type filter hook output priority -10; policy accept; }; " +
                         "add rule inet chaos_partition input iifname " + dev + " drop; " +
                         "add rule inet chaos_partition output oifname " + dev + " drop'");
    if (rc != 0) throw std::runtime_error("nft could not partition " + ns_->names.at(i));
    states_[i] = State::partitioned;
  }
  void reconnect(std::size_t i) {
    shell("ip netns exec " + ns_->names.at(i) + " nft delete table inet chaos_partition");
    states_[i] = State::up;
  }

  // Every host up again before the next run.
  void heal() {
    for (std::size_t i = 0; i < hosts_.size(); ++i) {
      if (states_[i] == State::stopped) resume(i);
      if (states_[i] == State::partitioned) reconnect(i);
      if (states_[i] == State::dead) restart(i);
    }
  }

  // For a hang: nothing left stopped or running behind the harness.
  void kill_all_now() {
    for (auto& h : hosts_) {
      h->signal(SIGCONT);
      h->signal(SIGKILL);
    }
  }

 private:
  void note_pid(std::size_t i) {
    if (i < pool_pids.size()) pool_pids[i].store(hosts_[i]->pid());
  }

  std::optional<Namespaces> ns_;
  std::vector<std::unique_ptr<FerrydProcess>> hosts_;
  std::vector<State> states_;
};

ferry::Runtime::Options cpu_options() {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";
  return o;
}

ferry::Runtime::Options pool_options(Pool& pool) {
  auto o = cpu_options();
  o.remotes = pool.addresses();
  o.token_file = pool.host(0).token_file();
  // A lost host's work goes to the others or the CPU; under require a
  // task pinned to a dead host would fail, which is not what is tested.
  o.remote_policy = ferry::RemotePolicy::prefer;
  o.remote_liveness = args.liveness;
  o.host_to_host = args.host_to_host;
  return o;
}

bool available(const ferry::Runtime& rt, const std::string& address) {
  for (const auto& d : rt.devices())
    if (d.name == "remote:" + address) return d.available;
  return false;
}

struct Record {
  int run = 0;
  std::string fault;
  std::size_t host = 0;
  double injected_at = 0;           // seconds into the graph
  std::optional<double> detected;   // seconds from the fault to the host seen down
  std::optional<double> back;       // seconds from resume/restart to the host in service again
  std::string after;                // a stopped host: "used again" or "retired"
  double makespan = 0;
  // Work done again for the fault (Runtime::recovery()), seconds of runs.
  double redone = 0;
  std::uint64_t placed_again = 0, replays = 0;
  double numpy_seconds = 0;  // the ferry.numpy pipeline's run beside the DAG
  bool wrong = false;
};

// Polls the runtime's view of host `i` until `down` (or not), for at most `limit`.
std::optional<double> wait_until(const ferry::Runtime& rt, const std::string& address, bool down,
                                 Clock::time_point from, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (available(rt, address) != down) return seconds_between(from, Clock::now());
    std::this_thread::sleep_for(1ms);
  }
  return std::nullopt;
}

// Another client takes what the host's memory limit leaves (32 MiB
// replicas until one is refused) and holds it until `release`: the run's
// own copies there must make room or go elsewhere. A raw protocol client,
// which keeps what it put (a runtime would evict its own replicas instead).
// Returns the MiB it held.
std::size_t fill_host(Pool& pool, std::size_t host, const std::atomic<bool>& release) {
  ferry::test::TestClient hog(pool.host(host).port(), "chaos-hog");
  hog.authenticate(FerrydProcess::default_token);
  const std::vector<double> block(std::size_t{4} << 20, 1.0);
  std::size_t held = 0;
  for (std::uint64_t id = 1; id <= 64; ++id, held += 32) {
    const auto ack = hog.put(id, ferry::protocol::DType::f64, 1, block.size(), block.data(), block.size() * sizeof(double));
    if (ack.status != ferry::protocol::Status::ok) break;  // full
  }
  while (!release.load()) std::this_thread::sleep_for(5ms);
  return held;
}

// Injects `fault` on host `h` after `delay`, and watches the runtime notice.
void inject(ferry::Runtime& rt, Pool& pool, Record& rec, Clock::time_point graph_start, std::chrono::milliseconds delay,
            const std::atomic<bool>& graph_done) {
  std::this_thread::sleep_for(delay);
  const std::string address = pool.host(rec.host).address();
  const auto t0 = Clock::now();
  rec.injected_at = seconds_between(graph_start, t0);
  if (rec.fault == "kill") {
    pool.kill(rec.host);
    rec.detected = wait_until(rt, address, true, t0, 10s);
  } else if (rec.fault == "restart") {
    pool.kill(rec.host);
    rec.detected = wait_until(rt, address, true, t0, 10s);
    pool.restart(rec.host);  // as a supervisor would, on the same port
    rec.back = wait_until(rt, address, false, Clock::now(), 15s);
  } else if (rec.fault == "stop" || rec.fault == "partition") {
    const bool stop = rec.fault == "stop";
    if (stop) pool.stop(rec.host);
    else pool.partition(rec.host);
    // Held past the liveness limit, by a margin: a host stopped only
    // briefly is a slow host, not a lost one.
    const auto hold = args.liveness * 2 + 500ms;
    rec.detected = wait_until(rt, address, true, t0, hold);
    std::this_thread::sleep_until(t0 + hold);
    if (stop) pool.resume(rec.host);
    else pool.reconnect(rec.host);
    // Used again once reconnected; a host that does not come back within
    // the bound is retired for this runtime.
    rec.back = wait_until(rt, address, false, Clock::now(), 15s);
  } else if (rec.fault == "fill") {
    rec.after = "filled with " + std::to_string(fill_host(pool, rec.host, graph_done)) + " MiB";  // not a loss
  }
}

// After a stopped host resumed: a task pinned to it is either run there
// (the host reconnected, trusted afresh) or elsewhere (retired); its result
// is right either way.
void check_after_stop(ferry::Runtime& rt, Pool& pool, Record& rec) {
  const std::string address = pool.host(rec.host).address();
  auto x = rt.buffer<double>(4096);
  std::ranges::fill(x.host(), 0.5);
  auto task = rt.submit("sum", ferry::read(x), ferry::on(ferry::remote(address)));
  const double sum = task.result();
  EXPECT_EQ(sum, 2048.0) << "run " << rec.run << ": a task on the resumed host " << address << " ran on "
                         << task.device();
  if (sum != 2048.0) rec.wrong = true;
  rec.after = task.device() == "remote:" + address ? "used again" : "retired";
}

bool same_outputs(const ferry::chaos::Outputs& got, const ferry::chaos::Outputs& expected, const Record& rec) {
  const std::string run = "run " + std::to_string(rec.run) + " (" + rec.fault + " on host " + std::to_string(rec.host) +
                          " at " + std::to_string(rec.injected_at) + " s): ";
  bool same = got.results.size() == expected.results.size() && got.buffers.size() == expected.buffers.size();
  if (!same) ADD_FAILURE() << run << "outputs missing";
  for (std::size_t t = 0; same && t < got.results.size(); ++t)
    if (got.results[t] != expected.results[t]) {
      same = false;
      ADD_FAILURE() << run << "task result " << t << " is " << got.results[t] << ", the CPU's "
                    << expected.results[t];
    }
  for (std::size_t b = 0; b < std::min(got.buffers.size(), expected.buffers.size()); ++b) {
    const auto& g = got.buffers[b];
    const auto& e = expected.buffers[b];
    if (g == e) continue;
    same = false;
    std::size_t i = 0, differ = 0;
    while (i < std::min(g.size(), e.size()) && g[i] == e[i]) ++i;
    for (std::size_t j = 0; j < std::min(g.size(), e.size()); ++j) differ += g[j] != e[j];
    ADD_FAILURE() << run << "output " << b << " differs from the CPU's in " << differ << " of " << e.size()
                  << " elements, first at " << i << ": " << (i < g.size() ? g[i] : 0.0) << " against "
                  << (i < e.size() ? e[i] : 0.0);
  }
  if (!same) {
    std::string story;
    for (const auto& d : got.edge_devices) story += " " + d;
    ADD_FAILURE() << run << "the edges' tasks ran at" << story;
    std::string chain;
    for (const auto& d : got.chain_devices) chain += " " + d;
    ADD_FAILURE() << run << "the chain ran at" << chain;
  }
  return same;
}

std::string percentiles(std::vector<double> v) {
  if (v.empty()) return "none";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))]; };
  std::ostringstream s;
  s.precision(3);
  s << std::fixed << "n=" << v.size() << " min " << v.front() << " p50 " << at(0.5) << " p90 " << at(0.9) << " p99 "
    << at(0.99) << " max " << v.back();
  return s.str();
}

void print_summary(const std::vector<Record>& records, double baseline) {
  std::printf("\nchaos: %zu runs, fault-free makespan %.3f s\n", records.size(), baseline);
  std::map<std::string, std::vector<const Record*>> by_fault;
  for (const auto& r : records) by_fault[r.fault].push_back(&r);
  std::vector<double> all_detect;
  for (const auto& [fault, rs] : by_fault) {
    // The measure: the makespan against the fault-free one plus the
    // work done again; and the same with the time the loss took to be seen.
    std::vector<double> detect, back, ratio, against_redone, against_redone_and_detection, redone;
    int undetected = 0, wrong = 0, used = 0, retired = 0;
    for (const auto* r : rs) {
      if (r->detected) detect.push_back(*r->detected), all_detect.push_back(*r->detected);
      else ++undetected;
      if (r->back) back.push_back(*r->back);
      ratio.push_back(r->makespan / baseline);
      redone.push_back(r->redone);
      against_redone.push_back(r->makespan / (baseline + r->redone));
      against_redone_and_detection.push_back(r->makespan / (baseline + r->redone + r->detected.value_or(0)));
      wrong += r->wrong;
      used += r->after == "used again";
      retired += r->after == "retired";
    }
    if (fault == "fill") {  // a full host is not a lost one: nothing to detect
      std::printf("  %-8s runs %zu, wrong %d\n", fault.c_str(), rs.size(), wrong);
    } else {
      std::printf("  %-8s runs %zu, wrong %d, not seen down %d\n", fault.c_str(), rs.size(), wrong, undetected);
      std::printf("           detection (s): %s\n", percentiles(detect).c_str());
    }
    if (!back.empty()) std::printf("           back in service (s): %s\n", percentiles(back).c_str());
    std::printf("           makespan / fault-free: %s\n", percentiles(ratio).c_str());
    std::printf("           work done again (s): %s\n", percentiles(redone).c_str());
    std::printf("           makespan / (fault-free + done again): %s\n", percentiles(against_redone).c_str());
    if (fault != "fill")
      std::printf("           makespan / (fault-free + done again + detection): %s\n",
                  percentiles(against_redone_and_detection).c_str());
    if (fault == "stop" || fault == "partition")
      std::printf("           host back: used again %d, retired %d\n", used, retired);
  }
  std::printf("  all faults, detection (s): %s\n", percentiles(all_detect).c_str());
  std::printf("  per run: run fault host injected_at detected back makespan placed_again replays redone_s numpy_s\n");
  for (const auto& r : records)
    std::printf("    %3d %-8s %zu %.3f %s %s %.3f %llu %llu %.3f %.3f%s\n", r.run, r.fault.c_str(), r.host,
                r.injected_at, r.detected ? std::to_string(*r.detected).c_str() : "-",
                r.back ? std::to_string(*r.back).c_str() : "-", r.makespan,
                static_cast<unsigned long long>(r.placed_again), static_cast<unsigned long long>(r.replays), r.redone,
                r.numpy_seconds, r.wrong ? " WRONG" : "");
}

// The ferry.numpy client on the pool, unless --parts leaves it out. A
// Python without the ferry package cannot run it: said, not hidden (the
// README's test command installs the package before ctest runs).
std::unique_ptr<ferry::chaos::NumpyClient> start_numpy_client(Pool& pool) {
  if (!args.numpy) return nullptr;
  const std::string python = CHAOS_PYTHON;
  if (python.empty() || shell("'" + python + "' -c 'import ferry.numpy' 2>/dev/null") != 0) {
    std::printf("chaos: the ferry.numpy pipeline does not run: %s has no ferry package (scripts/python-env.sh)\n",
                python.empty() ? "no Python" : python.c_str());
    return nullptr;
  }
  auto client = std::make_unique<ferry::chaos::NumpyClient>(python, CHAOS_NUMPY_PIPELINE, pool.addresses(),
                                                            pool.host(0).token_file().string(),
                                                            std::chrono::duration<double>(args.liveness).count());
  pool_pids[3].store(client->pid());
  return client;
}

// The pipeline's answer for the run it started: right, or a failure saying what.
bool numpy_right(ferry::chaos::NumpyClient& numpy, Record& rec) {
  const std::string answer = numpy.result();
  double seconds = 0;
  unsigned long long on_pool = 0;
  if (std::sscanf(answer.c_str(), "ok %lf %llu", &seconds, &on_pool) == 2) {
    rec.numpy_seconds = seconds;
    return true;
  }
  ADD_FAILURE() << "run " << rec.run << " (" << rec.fault << " on host " << rec.host << "): the ferry.numpy pipeline: "
                << answer;
  return false;
}

TEST(Chaos, TheMixedDagIsRightThroughFaults) {
  const std::uint64_t seed =
      args.seed != 0 ? args.seed : static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  std::printf("chaos: seed %llu (--seed to replay), %d runs, faults", static_cast<unsigned long long>(seed), args.runs);
  for (const auto& f : args.faults) std::printf(" %s", f.c_str());
  std::printf(", liveness %lld ms\n", static_cast<long long>(args.liveness.count()));
  std::mt19937_64 rng(seed);

  ferry::chaos::Outputs expected;
  {
    ferry::Runtime cpu(cpu_options());
    expected = ferry::chaos::run_mixed_dag(cpu, ferry::chaos::on_cpu(3), args.shape);
  }
  std::optional<Namespaces> ns;
  if (args.netns) {
    ns = Namespaces::from_environment();
    ASSERT_EQ(ns->hosts.size(), 3u) << "--netns runs inside tests/integration/pool_hosts.sh --hosts-only with 3 rates";
    ASSERT_EQ(ns->names.size(), 3u);
    ASSERT_EQ(ns->devices.size(), 3u);
  }
  Pool pool(3, ns);
  const auto where = ferry::chaos::on_pool(pool.addresses());
  auto numpy = start_numpy_client(pool);

  // The fault-free makespan, the best of three (the first also warms caches).
  double baseline = 1e9;
  for (int i = 0; i < 3; ++i) {
    if (numpy) numpy->start();  // its runtime connected, before this one's clock starts
    ferry::Runtime rt(pool_options(pool));
    const auto start = Clock::now();
    const auto got = ferry::chaos::run_mixed_dag(rt, where, args.shape);
    Record rec;
    rec.run = -1 - i;
    rec.fault = "none";
    if (numpy) {
      ASSERT_TRUE(numpy_right(*numpy, rec)) << "wrong without a fault";
    }
    baseline = std::min(baseline, seconds_between(start, Clock::now()));
    ASSERT_TRUE(same_outputs(got, expected, rec)) << "wrong without a fault";
  }

  std::vector<Record> records;
  for (int run = 0; run < args.runs; ++run) {
    current_run.store(run);
    Record rec;
    rec.run = run;
    rec.fault = args.faults[static_cast<std::size_t>(run) % args.faults.size()];
    rec.host = static_cast<std::size_t>(rng() % pool.size());
    const auto delay = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::uniform_real_distribution<double>(0.02, 0.7)(rng) * baseline * 1000));
    auto done = std::async(std::launch::async, [&] {
      // Both clients connected before the fault can come (numpy_pipeline.py says why).
      if (numpy) numpy->start();
      ferry::Runtime rt(pool_options(pool));
      const auto start = Clock::now();
      std::atomic<bool> graph_done{false};
      std::thread injector([&] { inject(rt, pool, rec, start, delay, graph_done); });
      ferry::chaos::Outputs got;
      try {
        got = ferry::chaos::run_mixed_dag(rt, where, args.shape);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "run " << run << " (" << rec.fault << " on host " << rec.host << "): " << e.what();
        rec.wrong = true;
      }
      if (numpy && !numpy_right(*numpy, rec)) rec.wrong = true;
      rec.makespan = seconds_between(start, Clock::now());
      const auto recovery = rt.recovery();
      rec.placed_again = recovery.tasks_placed_again;
      rec.replays = recovery.lineage_replays;
      rec.redone = recovery.placed_again_seconds + recovery.replay_seconds;
      graph_done.store(true);
      injector.join();
      if (!rec.wrong && !same_outputs(got, expected, rec)) rec.wrong = true;
      if (rec.fault == "stop" || rec.fault == "partition") check_after_stop(rt, pool, rec);
    });
    if (done.wait_for(args.bound) != std::future_status::ready) {
      std::fprintf(stderr, "chaos: run %d (%s on host %zu at %.3f s) did not finish in %lld s: a hang\n", run,
                   rec.fault.c_str(), rec.host, rec.injected_at, static_cast<long long>(args.bound.count()));
      print_summary(records, baseline);
      pool.kill_all_now();
      if (numpy) ::kill(numpy->pid(), SIGKILL);
      std::fflush(nullptr);
      std::_Exit(3);  // the run's threads cannot be joined
    }
    done.get();
    records.push_back(rec);
    std::printf("chaos: run %d %s host %zu at %.3f s: detected %s, makespan %.3f s%s%s\n", run, rec.fault.c_str(),
                rec.host, rec.injected_at, rec.detected ? std::to_string(*rec.detected).c_str() : "no",
                rec.makespan, rec.after.empty() ? "" : (", " + rec.after).c_str(), rec.wrong ? " WRONG" : "");
    std::fflush(stdout);
    pool.heal();
  }
  print_summary(records, baseline);
  const auto wrong = std::count_if(records.begin(), records.end(), [](const Record& r) { return r.wrong; });
  EXPECT_EQ(wrong, 0) << "runs with wrong results";
}

// One ferryd on this host, the lane on, a kill -9 while payloads cross it.
TEST(Chaos, SharedMemoryLaneSurvivesKills) {
  if (args.lane_kills <= 0) GTEST_SKIP() << "--lane-kills N runs it";
  ::unsetenv("FERRY_SHARED_MEMORY");  // the lane, as a same-host client gets it
  std::mt19937_64 rng(args.seed != 0 ? args.seed : 1);
  FerrydProcess server({}, FerrydProcess::default_token, ferry::test::stable_port());
  std::vector<double> notice;
  int wrong = 0;
  for (int kill = 0; kill < args.lane_kills; ++kill) {
    auto done = std::async(std::launch::async, [&] {
      auto o = cpu_options();
      o.remotes = {server.address()};
      o.token_file = server.token_file();
      o.remote_policy = ferry::RemotePolicy::prefer;
      o.remote_liveness = args.liveness;
      o.auto_chunk = false;  // one payload of 32 MiB per ship
      ferry::Runtime rt(o);
      const std::size_t n = std::size_t{4} << 20;  // 32 MiB
      auto x = rt.buffer<double>(n);
      std::ranges::fill(x.host(), 1.0);
      const auto at = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40000)(rng));
      std::thread killer([&] {
        std::this_thread::sleep_for(at);
        const auto t0 = Clock::now();
        server.stop(SIGKILL);
        if (auto seen = wait_until(rt, server.address(), true, t0, 10s)) notice.push_back(*seen);
      });
      for (int i = 0; i < 8; ++i) {
        (void)x.host();  // ships again: each task's 32 MiB crosses the lane
        rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote()));
      }
      rt.wait();
      killer.join();
      auto h = x.host_read();
      if (h[0] != 256.0 || h[n - 1] != 256.0) ++wrong;
    });
    if (done.wait_for(args.bound) != std::future_status::ready) {
      std::fprintf(stderr, "chaos: lane kill %d did not finish in %lld s: the client wedged\n", kill,
                   static_cast<long long>(args.bound.count()));
      std::fflush(nullptr);
      std::_Exit(3);
    }
    done.get();
    server.restart();
  }
  std::printf("chaos: %d kill -9s of a same-host ferryd with payloads on the shared-memory lane: 0 wedges, %d wrong; "
              "loss noticed (s): %s\n",
              args.lane_kills, wrong, percentiles(notice).c_str());
  EXPECT_EQ(wrong, 0);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);  // takes the --gtest_* flags out first
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--netns") {
      args.netns = true;
      continue;
    }
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) {
      std::fprintf(stderr, "chaos_test: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--runs") args.runs = std::atoi(value);
    else if (a == "--seed") args.seed = std::strtoull(value, nullptr, 10);
    else if (a == "--faults") args.faults = split(value);
    else if (a == "--parts") {
      const auto parts = split(value);
      const auto has = [&](const char* p) { return std::find(parts.begin(), parts.end(), p) != parts.end(); };
      args.shape.cholesky = has("cholesky");
      args.shape.chained = has("chain");
      args.shape.edged = has("edges");
      args.shape.chunked = has("chunked");
      args.numpy = has("numpy");
    } else if (a == "--host-to-host") args.host_to_host = std::atoi(value) != 0;
    else if (a == "--lane-kills") args.lane_kills = std::atoi(value);
    else if (a == "--liveness-ms") args.liveness = std::chrono::milliseconds(std::atoi(value));
    else if (a == "--bound-s") args.bound = std::chrono::seconds(std::atoi(value));
    else {
      std::fprintf(stderr, "chaos_test: unknown argument %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  for (const auto& f : args.faults)
    if (f != "kill" && f != "stop" && f != "restart" && (f != "fill" || args.netns) && (f != "partition" || !args.netns)) {
      std::fprintf(stderr, "chaos_test: unknown fault %s (kill, stop, restart, fill; partition with --netns, fill without)\n",
                   f.c_str());
      return 2;
    }
  if (args.runs < 0 || args.faults.empty()) return 2;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, on_fatal_signal);
  return RUN_ALL_TESTS();
}
