// What a device reports when a task's run or a copy ends, whichever device
// it is: the perf model learns what the run cost, the link model what the
// copy took, and the trace draws both. One place for it, so a new trace
// field or a new rule for what the models learn is one edit, not four.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "ferry/runtime/place.hpp"

namespace ferry::detail {

class Device;
class DeviceHost;
struct TaskRecord;

// A task's run as the device that ran it measured it.
struct RunRecord {
  // When the run started and ended on the steady clock (the task's start_ns
  // and end_ns).
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  // What the perf model learns the run cost, in seconds; none where the
  // device could not measure it. A run that failed teaches it nothing.
  std::optional<double> cost_seconds;
  // The trace lane its span is drawn on.
  int lane = 0;
  // Where its span starts on the trace's clock, where the device read that
  // clock as the run began; else the span ends now and lasts the run.
  std::optional<std::int64_t> trace_start_ns;
};

// Nanoseconds since the steady clock's epoch: the clock of a task's times.
inline std::int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Stamps the task's times, feeds the perf model (a measured run without
// error) and, when tracing, records the task's span (which takes the
// task's predecessor list).
void record_run(DeviceHost& host, const Device& device, TaskRecord& task, const RunRecord& run);

// A copy shorter than this measures a link's latency and noise more than its
// bandwidth: the link model learns only from copies of this size or more.
inline constexpr std::size_t link_sample_min_bytes = std::size_t{64} << 10;

// A copy into or out of a device's memory node, as the device measured it.
struct TransferRecord {
  MemoryNodeId from = host_node;
  MemoryNodeId to = host_node;
  std::size_t bytes = 0;
  std::chrono::steady_clock::time_point start;
  // For the trace: into the device (a ship) or out of it (a fetch), on which
  // lane, from which time on the trace's clock.
  bool to_device = true;
  int lane = 0;
  std::int64_t trace_start_ns = 0;
};

// Feeds the link model (from a copy of link_sample_min_bytes or more), adds
// the bytes to the device's `counter` and, when tracing, records the copy.
void record_transfer(DeviceHost& host, const Device& device, std::atomic<std::size_t>& counter,
                     const TransferRecord& copy);

}  // namespace ferry::detail
