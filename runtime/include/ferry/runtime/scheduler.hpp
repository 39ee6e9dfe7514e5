// Placement: for each task, the device expected to finish it first (HEFT,
// StarPU's dmda), or a simpler policy. decide() is a pure function of its
// input, so it is tested with synthetic devices and links.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/runtime/link_model.hpp"
#include "ferry/runtime/perf_model.hpp"
#include "ferry/runtime/place.hpp"

namespace ferry {

enum class Policy : std::uint8_t { heft, eager, cpu, gpu, random };
const char* to_string(Policy policy) noexcept;
// Throws UsageError naming the valid policies.
Policy parse_policy(std::string_view text);

struct DeviceSnapshot {
  DeviceId id = 0;
  std::string name;        // "cpu", "cuda:0", "remote:gpu1:7070/cuda:0"
  DeviceKind kind = DeviceKind::cpu;
  MemoryNodeId node = host_node;
  std::string perf_key;    // which performance models apply, e.g. "cpu-2t" or the GPU's model name
  DevicePeak peak;
  double busy_until = 0;   // seconds from now until its queued work is expected done
  // The same for the part of it ready to run now: a task ready now runs
  // after that, while tasks still waiting for predecessors queue behind it
  // when they become ready (devices take ready tasks in order).
  double ready_busy_until = 0;
  // A remote: seconds until the bytes of tasks already assigned to it have
  // crossed its link (they share it, one after another).
  double link_busy_until = 0;
  // Seconds a task spends reaching the device and being answered, beside its
  // run: a remote's link latency there and back (each host its own link).
  double round_trip = 0;
  std::size_t queued = 0;  // tasks assigned and not finished
  bool can_run = true;     // has an implementation of the kernel and matches the task's Place
};

struct InputSnapshot {
  std::size_t bytes = 0;
  std::vector<MemoryNodeId> valid_on;  // nodes holding a valid replica
  // Seconds from now until the task still writing it is expected to be done
  // (0: nothing pending): it cannot be read, or sent anywhere, before then.
  double available_in = 0;
};

struct DecisionInput {
  Policy policy = Policy::heft;
  std::string kernel;
  std::size_t bytes = 0;  // what the call touches; picks the size bucket
  Cost hint;
  std::vector<DeviceSnapshot> devices;
  std::vector<InputSnapshot> inputs;  // buffers the task reads
  // Bytes the task writes. A remote's results are the program's, which runs
  // here: they come home over its link after the run (part of rtt).
  std::size_t output_bytes = 0;
  // Nothing it reads waits for an unfinished writer: it is ready when
  // placed, so a device's wait is its ready work (ready_busy_until), not all
  // it was assigned.
  bool ready_now = false;
  const PerfModels* models = nullptr;
  const LinkModels* links = nullptr;
  std::mt19937_64* rng = nullptr;     // the random policy only
};

struct Candidate {
  DeviceId device = 0;
  std::string name;
  bool eligible = false;
  double ready = 0;       // busy_until (ready_busy_until for a task ready now)
  double data_ready = 0;  // seconds until its inputs could be there
  double round_trip = 0;  // DeviceSnapshot::round_trip, and a remote's results home
  // A remote: seconds its link carries this task's bytes (inputs there,
  // results home), which tasks placed after it wait behind.
  double link_seconds = 0;
  Estimate exec;
  double finish = 0;      // max(ready, data_ready) + round_trip + exec.seconds
};

struct Decision {
  DeviceId device = 0;
  Policy policy = Policy::heft;
  std::vector<Candidate> candidates;  // one per device, in input order
  std::string reason;                 // "earliest finish", "calibrating cuda:0", "only eligible device"...
};

// Throws UsageError when no device is eligible (the message lists why each is not).
Decision decide(const DecisionInput& input);

// A small table: device, ready, data, exec (source, samples), finish, and
// the reason; its last line ends with the chosen device's expected finish
// against the runner-up's (versus_runner_up).
std::string explain(const Decision& decision);
// "cuda:0 finishes in 1.010 ms (history) vs cpu in 4.000 ms (probe)"; empty
// with fewer than two eligible devices.
std::string versus_runner_up(const Decision& decision);

}  // namespace ferry
