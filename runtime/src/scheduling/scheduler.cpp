// Placement decisions. decide() only reads its input, so the
// runtime can call it from any thread and tests can feed it synthetic devices.
#include "ferry/runtime/scheduler.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "ferry/error.hpp"

namespace ferry {

namespace {

constexpr std::array policies{Policy::heft, Policy::eager, Policy::cpu, Policy::gpu, Policy::random};

// A remote device is a GPU host's device: the gpu policy counts it as a GPU.
bool is_gpu(DeviceKind kind) { return kind == DeviceKind::cuda || kind == DeviceKind::remote; }

// Empty when eligible, else why not.
std::string ineligible_because(const DeviceSnapshot& device, const DecisionInput& input) {
  if (!device.can_run) return fmt::format("cannot run kernel '{}' or excluded by placement", input.kernel);
  if (input.policy == Policy::cpu && device.kind != DeviceKind::cpu) return "policy cpu: not a CPU device";
  if (input.policy == Policy::gpu && !is_gpu(device.kind)) return "policy gpu: not a GPU device";
  return {};
}

[[noreturn]] void throw_no_device(const DecisionInput& input) {
  std::string message = fmt::format("no device can run kernel '{}' under policy {}", input.kernel,
                                    to_string(input.policy));
  if (input.devices.empty()) message += ": no devices";
  if (input.policy == Policy::gpu &&
      std::none_of(input.devices.begin(), input.devices.end(), [](const auto& d) { return is_gpu(d.kind); }))
    message += "; policy gpu: no GPU device";
  for (const auto& device : input.devices)
    message += fmt::format("; {}: {}", device.name, ineligible_because(device, input));
  throw UsageError(message);
}

bool held_on(const InputSnapshot& in, MemoryNodeId node) {
  return std::find(in.valid_on.begin(), in.valid_on.end(), node) != in.valid_on.end();
}

// Seconds to move the input to `node` straight from its cheapest source.
double direct_seconds(const DecisionInput& input, const InputSnapshot& in, MemoryNodeId node) {
  double best = std::numeric_limits<double>::infinity();
  for (MemoryNodeId from : in.valid_on) best = std::min(best, input.links->seconds(from, node, in.bytes));
  return best;
}

// Seconds until every input could be on `node`: transfers run side by side,
// so the slowest one counts; one whose writer is still to finish moves only
// after that (HEFT's predecessor finish plus communication).
double data_ready(const DecisionInput& input, MemoryNodeId node) {
  double ready = 0;
  for (const auto& in : input.inputs) {
    // No valid replica anywhere: a predecessor is still producing it, and
    // where it lands is not known yet.
    if (in.valid_on.empty()) continue;
    if (held_on(in, node)) {
      ready = std::max(ready, in.available_in);
      continue;
    }
    double best = direct_seconds(input, in, node);
    // Between two remote hosts the data moves directly (host-to-host) once
    // that link was measured (the line above); until then, and when it is
    // switched off, it goes through this process: both hops, one after the
    // other.
    for (MemoryNodeId from : in.valid_on)
      if (from != host_node && node != host_node)
        best = std::min(best, input.links->seconds(from, host_node, in.bytes) +
                                  input.links->seconds(host_node, node, in.bytes));
    ready = std::max(ready, in.available_in + best);
  }
  return ready;
}

// Seconds a remote's link carries the task's inputs there (each from its
// cheapest source; latency included, as each is a transfer of its own).
double link_load(const DecisionInput& input, MemoryNodeId node) {
  double seconds = 0;
  for (const auto& in : input.inputs) {
    if (in.valid_on.empty() || held_on(in, node)) continue;
    if (const double best = direct_seconds(input, in, node); std::isfinite(best)) seconds += best;
  }
  return seconds;
}

// Seconds to bring a remote task's results home after it ran (the link's
// latency is in DeviceSnapshot::round_trip already).
double results_home(const DecisionInput& input, const DeviceSnapshot& device) {
  if (device.kind != DeviceKind::remote || input.output_bytes == 0) return 0;
  const Link link = input.links->get(device.node, host_node);
  if (link.bytes_per_second <= 0) return 0;  // not measured yet: nothing to weigh
  return static_cast<double>(input.output_bytes) / link.bytes_per_second;
}

// Runs measured in this size bucket; a regression's sample count is over all buckets.
std::size_t bucket_runs(const Estimate& e) { return e.source == Estimate::Source::history ? e.samples : 0; }

// The eligible candidate that no other beats under `better(i, j)` (indices);
// on a tie the first in input order.
template <typename Better>
std::size_t pick(const std::vector<Candidate>& candidates, Better better) {
  std::size_t best = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].eligible) continue;
    if (best == candidates.size() || better(i, best)) best = i;
  }
  return best;
}

// Exploration sends a task to an unmeasured device only while few tasks wait
// there: runs are counted when they finish, so a burst submitted at once
// would otherwise all go to the one device nobody has measured yet.
constexpr std::size_t kExploreWhileQueued = 2;
// ...and only when, with a kernel that took no time there, it would finish
// within this fraction of every other device's estimate (a fifth sooner).
constexpr double kExploreWithin = 0.8;
// A remote host is chosen over a local device only when its expected finish
// is at most this fraction of the local one's.
constexpr double kRemoteMargin = 0.9;

// Its finish with a kernel that took no time: what the wait, the data and
// the link cost whatever the model says.
double finish_without_exec(const Candidate& c) { return std::max(c.ready, c.data_ready) + c.round_trip; }

std::pair<std::size_t, std::string> heft(const std::vector<Candidate>& candidates,
                                         const std::vector<DeviceSnapshot>& devices) {
  // Exploring a device pays when it might win clearly: not when, even with
  // a kernel that took no time, it would finish after (or barely before)
  // another device's estimate. A tile over a slow link is the case: measuring
  // the kernel there cannot change where such tasks go, each try costs the
  // whole transfer, and the output then draws its readers there too.
  const auto could_win = [&](std::size_t i) {
    for (std::size_t j = 0; j < candidates.size(); ++j)
      if (j != i && candidates[j].eligible &&
          finish_without_exec(candidates[i]) > kExploreWithin * candidates[j].finish)
        return false;
    return true;
  };
  const auto explorable = [&](std::size_t i) {
    return candidates[i].eligible && !candidates[i].exec.calibrated && devices[i].queued < kExploreWhileQueued &&
           could_win(i);
  };
  bool exploring = false;
  for (std::size_t i = 0; i < candidates.size(); ++i) exploring = exploring || explorable(i);
  if (exploring) {
    // An unmeasured device would otherwise lose to the guess of its hint
    // forever (or win on a wild one): run it until its model is trustworthy.
    const auto i = pick(candidates, [&](std::size_t x, std::size_t y) {
      const Candidate& a = candidates[x];
      const Candidate& b = candidates[y];
      if (explorable(x) != explorable(y)) return explorable(x);
      if (bucket_runs(a.exec) != bucket_runs(b.exec)) return bucket_runs(a.exec) < bucket_runs(b.exec);
      return a.ready < b.ready;
    });
    return {i, fmt::format("calibrating {} ({} runs in this size bucket)", candidates[i].name,
                           bucket_runs(candidates[i].exec))};
  }
  // A remote host must beat this process's own devices by a margin: its
  // estimate adds up more uncertain parts (link models, a network others
  // share, the client's CPU that seals and pushes the bytes), and a wrong
  // remote choice costs more than a wrong local one (what it writes must
  // come home, and its readers are drawn to it).
  const auto weighed = [&](std::size_t i) {
    return devices[i].kind == DeviceKind::remote ? candidates[i].finish / kRemoteMargin : candidates[i].finish;
  };
  const auto i = pick(candidates, [&](std::size_t x, std::size_t y) {
    if (weighed(x) != weighed(y)) return weighed(x) < weighed(y);
    return candidates[x].ready < candidates[y].ready;
  });
  const auto plain = pick(candidates, [&](std::size_t x, std::size_t y) {
    if (candidates[x].finish != candidates[y].finish) return candidates[x].finish < candidates[y].finish;
    return candidates[x].ready < candidates[y].ready;
  });
  if (plain != i) return {i, "earliest expected finish, a remote host needing a tenth less to be chosen"};
  return {i, "earliest expected finish"};
}

}  // namespace

const char* to_string(Policy policy) noexcept {
  switch (policy) {
    case Policy::heft: return "heft";
    case Policy::eager: return "eager";
    case Policy::cpu: return "cpu";
    case Policy::gpu: return "gpu";
    case Policy::random: return "random";
  }
  return "?";
}

Policy parse_policy(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string valid;
  for (Policy p : policies) {
    if (lower == to_string(p)) return p;
    valid += valid.empty() ? "" : ", ";
    valid += to_string(p);
  }
  throw UsageError(fmt::format("unknown scheduling policy '{}' (valid: {})", text, valid));
}

Decision decide(const DecisionInput& input) {
  if (input.models == nullptr || input.links == nullptr)
    throw UsageError("decide: performance and link models are required");
  if (input.policy == Policy::random && input.rng == nullptr)
    throw UsageError("decide: policy random needs a random number generator");

  Decision decision;
  decision.policy = input.policy;
  std::size_t eligible = 0;
  for (const auto& device : input.devices) {
    Candidate c;
    c.device = device.id;
    c.name = device.name;
    c.eligible = ineligible_because(device, input).empty();
    if (c.eligible) {
      ++eligible;
      c.ready = input.ready_now ? device.ready_busy_until : device.busy_until;
      c.data_ready = data_ready(input, device.node);
      const double home = results_home(input, device);
      if (device.kind == DeviceKind::remote) {
        // Its bytes queue behind those of the tasks already placed there.
        c.link_seconds = link_load(input, device.node) + home;
        if (c.link_seconds > 0) c.data_ready += device.link_busy_until;
      }
      c.exec = input.models->estimate(input.kernel, device.perf_key, input.bytes, input.hint, device.peak);
      c.round_trip = device.round_trip + home;
      c.finish = std::max(c.ready, c.data_ready) + c.round_trip + c.exec.seconds;
    }
    decision.candidates.push_back(std::move(c));
  }
  if (eligible == 0) throw_no_device(input);

  const auto& candidates = decision.candidates;
  std::size_t chosen = 0;
  if (eligible == 1) {
    chosen = pick(candidates, [](std::size_t, std::size_t) { return false; });
    decision.reason = "only eligible device";
  } else if (input.policy == Policy::eager) {
    chosen = pick(candidates, [&](std::size_t a, std::size_t b) {
      if (input.devices[a].queued != input.devices[b].queued) return input.devices[a].queued < input.devices[b].queued;
      return candidates[a].ready < candidates[b].ready;
    });
    decision.reason = "least loaded";
  } else if (input.policy == Policy::random) {
    std::size_t nth = std::uniform_int_distribution<std::size_t>(0, eligible - 1)(*input.rng);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].eligible && nth-- == 0) {
        chosen = i;
        break;
      }
    }
    decision.reason = "random";
  } else {
    std::tie(chosen, decision.reason) = heft(candidates, input.devices);  // heft, or heft over the cpu/gpu subset
  }
  decision.device = candidates[chosen].device;
  return decision;
}

// The one-line why: the chosen device's expected finish against the
// runner-up's (the eligible device that would have finished first after it).
std::string versus_runner_up(const Decision& decision) {
  const Candidate* chosen = nullptr;
  const Candidate* runner_up = nullptr;
  for (const auto& c : decision.candidates) {
    if (!c.eligible) continue;
    if (c.device == decision.device) chosen = &c;
    else if (runner_up == nullptr || c.finish < runner_up->finish) runner_up = &c;
  }
  if (chosen == nullptr || runner_up == nullptr) return {};
  return fmt::format("{} finishes in {:.3f} ms ({}) vs {} in {:.3f} ms ({})", chosen->name, chosen->finish * 1e3,
                     to_string(chosen->exec.source), runner_up->name, runner_up->finish * 1e3,
                     to_string(runner_up->exec.source));
}

std::string explain(const Decision& decision) {
  std::size_t width = 6;
  for (const auto& c : decision.candidates) width = std::max(width, c.name.size());
  std::string out = fmt::format("  {:<{}}  {:<3}  {:>10}  {:>10}  {:>10}  {:>10} {:<18}  {:>10}\n", "device", width,
                                "ok", "ready ms", "data ms", "rtt ms", "exec ms", "(source, runs)", "finish ms");
  for (const auto& c : decision.candidates) {
    const char* mark = c.device == decision.device && c.eligible ? "*" : " ";
    if (!c.eligible) {
      out += fmt::format("{} {:<{}}  {:<3}  {:>10}  {:>10}  {:>10}  {:>10} {:<18}  {:>10}\n", mark, c.name, width, "no",
                         "-", "-", "-", "-", "", "-");
      continue;
    }
    const std::string source = fmt::format("({}, {})", to_string(c.exec.source), c.exec.samples);
    out += fmt::format("{} {:<{}}  {:<3}  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>10.3f} {:<18}  {:>10.3f}\n", mark, c.name,
                       width, "yes", c.ready * 1e3, c.data_ready * 1e3, c.round_trip * 1e3, c.exec.seconds * 1e3, source,
                       c.finish * 1e3);
  }
  out += fmt::format("policy {}: {}", to_string(decision.policy), decision.reason);
  if (const std::string versus = versus_runner_up(decision); !versus.empty()) out += "; " + versus;
  return out;
}

}  // namespace ferry
