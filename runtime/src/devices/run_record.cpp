#include "devices/run_record.hpp"

#include <utility>

#include "data/task_record.hpp"
#include "devices/device.hpp"
#include "devices/device_host.hpp"

namespace ferry::detail {

void record_run(DeviceHost& host, const Device& device, TaskRecord& task, const RunRecord& run) {
  task.start_ns = run.start_ns;
  task.end_ns = run.end_ns;
  if (!task.error && run.cost_seconds)
    host.models().record(task.kernel->name, device.perf_key(), task.bytes, *run.cost_seconds);
  Trace* trace = host.trace();
  if (trace == nullptr) return;
  TaskSpan span;
  span.task_id = task.id;
  span.name = task.name;
  span.kernel = task.kernel->name;
  span.device = device.name();
  span.lane = run.lane;
  span.end_ns = trace->now_ns();
  span.start_ns = run.trace_start_ns ? *run.trace_start_ns : span.end_ns - (run.end_ns - run.start_ns);
  span.predecessors = std::move(task.predecessors);
  span.failed = task.error != nullptr;
  trace->record(std::move(span));
}

void record_transfer(DeviceHost& host, const Device& device, std::atomic<std::size_t>& counter,
                     const TransferRecord& copy) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - copy.start).count();
  if (copy.bytes >= link_sample_min_bytes) host.links().record(copy.from, copy.to, copy.bytes, seconds);
  counter.fetch_add(copy.bytes, std::memory_order_relaxed);
  device.trace_transfer(host.trace(), copy.to_device, copy.lane, copy.bytes, copy.trace_start_ns);
}

}  // namespace ferry::detail
