#include "devices/offload_device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "base/transfer_label.hpp"
#include "data/dependencies.hpp"
#include "data/task_record.hpp"
#include "devices/device_host.hpp"
#include "devices/run_record.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

namespace ferry::detail {

OffloadDevice::OffloadDevice(DeviceHost& runtime, DeviceId id, std::string name, DeviceKind kind, MemoryNodeId node,
                             std::string perf_key, DevicePeak peak, DeviceHealth::Keep keep, bool up)
    : Device(id, std::move(name), kind, node, std::move(perf_key), peak), runtime_(runtime), health_(up, keep) {}

std::size_t OffloadDevice::evict(std::size_t bytes) {
  const std::size_t freed = evict_from_node(*this, held_.snapshot(), bytes);
  log().debug("{}: evicted {} to make room for {}", name(), format_bytes(freed), format_bytes(bytes));
  return freed;
}

void OffloadDevice::bring_home(const char* when) {
  for (auto& root : held_.take()) {
    try {
      forget_node(*root, *this);
    } catch (const std::exception& e) {
      // Its lineage recomputes it where it is needed (data/coherence.hpp).
      log().error("{}: could not bring a buffer home {}: {}", name(), when, e.what());
    }
  }
}

bool OffloadDevice::take_prefetch(TaskRecord* task, Prefetch& job) {
  for (std::size_t i = 0; i < task->buffers.size(); ++i)
    if (reads(task->buffer_arg(i).mode) && prefetchable(*task->buffers[i])) job.inputs.push_back(task->buffers[i]);
  if (job.inputs.empty()) return false;
  retain(task);
  job.task = task;
  work_.started();
  return true;
}

void OffloadDevice::run_prefetch(const Prefetch& job) {
  TaskRecord* task = job.task;
  const TaskLabelScope transfers_for(task->name);
  for (const auto& input : job.inputs) {
    if (!available() || task->done.load(std::memory_order_acquire)) return;  // too late to help
    const BufferState& view = *input;
    if (!room_for_prefetch(view)) continue;
    try {
      prefetch_on_node(view, *this, [&] { return prefetch_too_early(view, task); });
    } catch (const std::exception& e) {
      log().debug("{}: prefetch skipped: {}", name(), e.what());
    }
  }
}

void OffloadDevice::finish_prefetch(Prefetch& job) noexcept {
  TaskRecord* task = std::exchange(job.task, nullptr);
  job.inputs.clear();  // first: a drained device holds nothing of the job
  release(task);
  work_.finished();
}

bool OffloadDevice::fall_back(TaskRecord* task, const std::function<std::string()>& failure) {
  if (task->kernel->cpu) {
    runtime_.reschedule(task, *this);
    return true;
  }
  task->error = std::make_exception_ptr(KernelError(failure()));
  return false;
}

void OffloadDevice::open_link_lanes() {
  if (Trace* trace = runtime_.trace()) {
    lane_to_ = trace->lane(fmt::format("link host -> {}", name()), "link");
    lane_from_ = trace->lane(fmt::format("link {} -> host", name()), "link");
  }
}

OffloadDevice::CopyStart OffloadDevice::copy_starts() const {
  return {std::chrono::steady_clock::now(), runtime_.trace() ? runtime_.trace()->now_ns() : 0};
}

void OffloadDevice::copied_in(std::atomic<std::size_t>& counter, const CopyStart& start, std::size_t bytes,
                              MemoryNodeId from) {
  record_transfer(runtime_, *this, counter,
                  {.from = from, .to = node(), .bytes = bytes, .start = start.at,
                   .to_device = true, .lane = lane_to_, .trace_start_ns = start.trace_ns});
}

void OffloadDevice::copied_out(std::atomic<std::size_t>& counter, const CopyStart& start, std::size_t bytes) {
  record_transfer(runtime_, *this, counter,
                  {.from = node(), .to = host_node, .bytes = bytes, .start = start.at,
                   .to_device = false, .lane = lane_from_, .trace_start_ns = start.trace_ns});
}

double OffloadDevice::fastest(int rounds, const std::function<void()>& what) {
  double best = 1e9;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    what();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

void OffloadDevice::set_link(const Link& to_device, const Link& from_device) {
  runtime_.links().set(host_node, node(), to_device);
  runtime_.links().set(node(), host_node, from_device);
}

}  // namespace ferry::detail
