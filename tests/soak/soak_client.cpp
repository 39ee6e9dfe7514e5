// A soak client (tests/soak/soak.py starts two): the chaos harness's mixed
// DAG (tests/chaos/mixed_dag.hpp) in a loop against a pool of ferryd, under
// RemotePolicy::prefer with a short liveness limit, until a deadline. Each
// iteration's outputs are compared bit for bit with the same graph run once
// on the CPU alone, and one JSON line per iteration says what happened:
//
//   {"client":"cpp0","iter":7,"t0":..,"t1":..,"ok":true,"tasks":..,
//    "ran":{"cpu":12,"127.0.0.1:20001":40,...},
//    "before":{"127.0.0.1:20001":113,...},"after":{...}}
//
// With --fresh-runtime the runtime is closed at the end of each iteration,
// and the line has "rest":{"rss_kib":..,"fds":..}: this process's RSS and
// open fds just after, between runtimes (the driver judges this client's
// flatness on them: sampled from outside, its RSS and fds alternate between
// a runtime's level and this one's, and a window's median only says which
// level most samples fell on).
//
// `ran`: the tasks this runtime ran on each device in the iteration (its
// own count, DeviceInfo::tasks_run); `before`/`after`: each host's
// ferry_client_tasks_total{client="NAME"} (NAME: the key this client signs
// in with) scraped from the host's /metrics just before the iteration's
// first task and after rt.wait(), or null where the scrape failed. The
// driver compares the two over iterations no fault came near.
//
//   soak_client --name cpp0 --remotes A,B,C --metrics P,Q,R --identity KEY
//               --known-hosts FILE --deadline UNIX_SECONDS [--liveness-ms 1000]
//               [--fresh-runtime] [--pause-ms MS] [--out FILE]
//
// --fresh-runtime: a new Runtime every iteration (connects, signs in and
// leaves each time: ferryd's session churn); without it, one Runtime for the
// whole soak (the client's own state over hours).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "http_get.hpp"
#include "mixed_dag.hpp"
#include "proc_status.hpp"

namespace {

struct Args {
  std::string name;
  std::vector<std::string> remotes;
  std::vector<std::uint16_t> metrics;
  std::string identity, known_hosts, out;
  double deadline = 0;
  std::chrono::milliseconds liveness{1000};
  bool fresh_runtime = false;
  std::chrono::milliseconds pause{0};  // between iterations: the share of the box the soak takes
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ferry::Runtime::Options base_options() {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";
  return o;
}

ferry::Runtime::Options pool_options(const Args& args) {
  auto o = base_options();
  o.remotes = args.remotes;
  o.identity = args.identity;
  o.known_hosts = args.known_hosts;
  o.remote_policy = ferry::RemotePolicy::prefer;
  o.remote_liveness = args.liveness;
  return o;
}

// This client's ferry_client_tasks_total on the host whose operator port is `port`.
std::optional<long long> client_tasks(std::uint16_t port, const std::string& name) {
  try {
    const std::string text = ferry::test::http_get(port, "/metrics", std::chrono::seconds(2));
    if (text.find("200 OK") == std::string::npos) return std::nullopt;
    const std::string series = "ferry_client_tasks_total{client=\"" + name + "\"} ";
    const auto at = text.find(series);
    if (at == std::string::npos) return 0;  // nothing counted for it yet
    return std::stoll(text.substr(at + series.size()));
  } catch (const std::exception&) {
    return std::nullopt;  // down, or stopped (the read gave up)
  }
}

std::string scrape_json(const Args& args) {
  std::string out = "{";
  for (std::size_t i = 0; i < args.remotes.size(); ++i) {
    const auto v = client_tasks(args.metrics[i], args.name);
    out += (i ? "," : "") + ("\"" + args.remotes[i] + "\":") + (v ? std::to_string(*v) : "null");
  }
  return out + "}";
}

std::map<std::string, std::size_t> tasks_run(const ferry::Runtime& rt) {
  std::map<std::string, std::size_t> out;
  for (const auto& d : rt.devices()) out[d.name] += d.tasks_run;
  return out;
}

bool same(const ferry::chaos::Outputs& got, const ferry::chaos::Outputs& expected, std::string& why) {
  if (got.results != expected.results) {
    why = "task results differ";
    return false;
  }
  if (got.buffers.size() != expected.buffers.size()) {
    why = "outputs missing";
    return false;
  }
  for (std::size_t b = 0; b < got.buffers.size(); ++b)
    if (got.buffers[b] != expected.buffers[b]) {
      why = "output " + std::to_string(b) + " differs from the CPU's";
      return false;
    }
  return true;
}

// This process's RSS (KiB) and open fds, as the driver samples them from /proc.
std::string rest_json() {
  return ",\"rest\":{\"rss_kib\":" + std::to_string(ferry::test::rss_kib()) +
         ",\"fds\":" + std::to_string(ferry::test::fds_of(::getpid())) + "}";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

int run(const Args& args) {
  std::ofstream file;
  if (!args.out.empty()) file.open(args.out, std::ios::app);
  std::ostream& out = args.out.empty() ? std::cout : file;

  ferry::chaos::Outputs expected;
  {
    ferry::Runtime cpu(base_options());
    expected = ferry::chaos::run_mixed_dag(cpu, ferry::chaos::on_cpu(args.remotes.size()));
  }
  const auto where = ferry::chaos::on_pool(args.remotes);
  std::unique_ptr<ferry::Runtime> rt;
  int wrong = 0;
  for (int iter = 0; now_seconds() < args.deadline; ++iter) {
    if (!rt || args.fresh_runtime) {
      rt.reset();
      rt = std::make_unique<ferry::Runtime>(pool_options(args));
    }
    const auto ran_before = tasks_run(*rt);
    const double t0 = now_seconds();
    const std::string before = scrape_json(args);
    bool ok = false;
    std::string why;
    std::size_t tasks = 0;
    std::map<std::string, std::size_t> split_on;
    try {
      const auto got = ferry::chaos::run_mixed_dag(*rt, where);
      tasks = got.tasks;
      split_on = got.split_on;
      ok = same(got, expected, why);
    } catch (const std::exception& e) {
      why = std::string("threw: ") + e.what();
    }
    const std::string after = scrape_json(args);
    const double t1 = now_seconds();
    std::string ran = "{";
    for (const auto& [device, n] : tasks_run(*rt)) {
      // A split task's join is counted on its device beside the pieces
      // that ran there; only the pieces were runs of the host.
      const auto b = ran_before.find(device);
      const auto s = split_on.find(device);
      const std::size_t joins = s == split_on.end() ? 0 : s->second;
      const std::string host = device.starts_with("remote:") ? device.substr(7) : device;
      ran += (ran.size() > 1 ? "," : "") + ("\"" + host + "\":") +
             std::to_string(n - (b == ran_before.end() ? 0 : b->second) - joins);
    }
    ran += "}";
    wrong += !ok;
    std::string rest;
    if (args.fresh_runtime) {
      rt.reset();
      rest = rest_json();
    }
    char times[96];
    std::snprintf(times, sizeof times, "\"t0\":%.3f,\"t1\":%.3f", t0, t1);
    out << "{\"client\":\"" << args.name << "\",\"iter\":" << iter << "," << times << ",\"ok\":" << (ok ? "true" : "false")
        << ",\"tasks\":" << tasks << ",\"ran\":" << ran << ",\"before\":" << before << ",\"after\":" << after
        << (ok ? "" : ",\"why\":\"" + escape(why) + "\"") << rest << "}" << std::endl;
    std::this_thread::sleep_for(args.pause);
  }
  rt.reset();
  out << "{\"client\":\"" << args.name << "\",\"done\":true,\"wrong\":" << wrong << "}" << std::endl;
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fresh-runtime") {
      args.fresh_runtime = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "soak_client: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (a == "--name") args.name = value;
    else if (a == "--remotes") args.remotes = split(value);
    else if (a == "--metrics")
      for (const auto& p : split(value)) args.metrics.push_back(static_cast<std::uint16_t>(std::stoi(p)));
    else if (a == "--identity") args.identity = value;
    else if (a == "--known-hosts") args.known_hosts = value;
    else if (a == "--deadline") args.deadline = std::stod(value);
    else if (a == "--liveness-ms") args.liveness = std::chrono::milliseconds(std::stoi(value));
    else if (a == "--out") args.out = value;
    else if (a == "--pause-ms") args.pause = std::chrono::milliseconds(std::stoi(value));
    else {
      std::fprintf(stderr, "soak_client: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (args.name.empty() || args.remotes.empty() || args.metrics.size() != args.remotes.size() || args.deadline == 0) {
    std::fprintf(stderr,
                 "usage: soak_client --name N --remotes A,B,C --metrics P,Q,R --identity KEY --known-hosts FILE "
                 "--deadline UNIX_SECONDS [--liveness-ms MS] [--fresh-runtime] [--pause-ms MS] [--out FILE]\n");
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak_client %s: %s\n", args.name.c_str(), e.what());
    return 1;
  }
}
