// A place tasks run: the CPU workers, a local GPU, a remote GPU host. The
// runtime assigns each task to one device; the device runs it once its
// predecessors are done and reports back through DeviceHost::finish() (devices/device_host.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ferry/runtime/kernel.hpp"
#include "ferry/runtime/perf_model.hpp"
#include "ferry/runtime/place.hpp"
#include "ferry/runtime/scheduler.hpp"
#include "ferry/runtime/trace.hpp"

namespace ferry::detail {

struct TaskRecord;

// One copy per distinct device name for the life of the process (a handful:
// cpu, each GPU, each host ever reached), never freed.
const std::string* lasting_name(const std::string& name);

class Device {
 public:
  Device(DeviceId id, std::string name, DeviceKind kind, MemoryNodeId node, std::string perf_key, DevicePeak peak)
      : id_(id),
        name_(std::move(name)),
        lasting_name_(lasting_name(name_)),
        kind_(kind),
        node_(node),
        perf_key_(std::move(perf_key)),
        peak_(peak) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceId id() const noexcept { return id_; }
  const std::string& name() const noexcept { return name_; }
  // The name for a task's handles, which may outlive the device and the
  // runtime: kept for the process (lasting_name), so placing a task copies
  // no string and touches no reference count that the thread freeing the
  // task would touch again.
  const std::string* shared_name() const noexcept { return lasting_name_; }
  DeviceKind kind() const noexcept { return kind_; }
  MemoryNodeId node() const noexcept { return node_; }
  const std::string& perf_key() const noexcept { return perf_key_; }
  const DevicePeak& peak() const noexcept { return peak_; }

  virtual bool can_run(const KernelDef& kernel) const = 0;
  // Why can_run() said no, for the error a task pinned here gets.
  virtual std::string why_not(const KernelDef& /*kernel*/) const { return "no implementation for it"; }
  // False while the device cannot take tasks (a remote that is down, a GPU
  // after a sticky CUDA error).
  virtual bool available() const noexcept { return true; }
  // Why available() is false, for people (Runtime::devices); empty when not known.
  virtual std::string down_reason() const { return {}; }
  // Whether a task pinned here fails, rather than runs elsewhere, while
  // the device is down: a remote host under RemotePolicy::require.
  virtual bool pinned_tasks_fail_while_down() const noexcept { return false; }
  virtual unsigned lanes() const = 0;
  // The task is ready (its predecessors are done): run it.
  virtual void enqueue(TaskRecord* task) = 0;
  // The task was just assigned and may still wait for predecessors: start
  // moving its inputs now, so the transfers overlap their work.
  virtual void prefetch(TaskRecord* /*task*/) {}
  // Returns once nothing of this device runs any more.
  virtual void drain() = 0;
  // A thread is about to block until `task` is done: a device whose own
  // thread would only wait for the task's reply may run it on this thread
  // instead, which saves the waiter a wake-up (Task::wait). True when it ran
  // and finished the task here. With a deadline (Task::wait_for, Python's
  // interruptible waits) the device gives the task back, untouched, if its
  // reply has not come by then.
  virtual bool run_for_waiter(TaskRecord* /*task*/,
                              std::chrono::steady_clock::time_point /*deadline*/ =
                                  std::chrono::steady_clock::time_point::max()) {
    return false;
  }
  // A thread is about to block on this runtime's work: what the device holds
  // back to send with company (Connection::send_soon) leaves now.
  virtual void push() {}

  bool matches(const Place& place) const noexcept;

  // Backlog accounting for the scheduler's ready-time estimate: the run
  // times of assigned tasks, and (a remote) the time their bytes take on
  // its link, which they share one after another whatever the lanes.
  // The submitting thread adds and a worker subtracts, so each change moves
  // the counters' cache line between cores: a zero (a task placed without
  // an estimate, the only eligible device's) changes nothing and is skipped.
  void assigned(std::int64_t estimate_ns, std::int64_t link_ns = 0) noexcept {
    queued_.fetch_add(1, std::memory_order_relaxed);
    if (estimate_ns != 0) backlog_ns_.fetch_add(estimate_ns, std::memory_order_relaxed);
    if (link_ns != 0) link_backlog_ns_.fetch_add(link_ns, std::memory_order_relaxed);
  }
  // An assigned task became ready to run: its estimate counts in the ready backlog too.
  void now_ready(std::int64_t estimate_ns) noexcept {
    if (estimate_ns != 0) ready_backlog_ns_.fetch_add(estimate_ns, std::memory_order_relaxed);
  }
  // `was_ready`: now_ready was called for it.
  void completed(std::int64_t estimate_ns, std::int64_t link_ns, bool was_ready) noexcept {
    unassigned(estimate_ns, link_ns, was_ready);
    tasks_run_.fetch_add(1, std::memory_order_relaxed);
  }
  // Taken back unrun (its device failed): it counts elsewhere now.
  void unassigned(std::int64_t estimate_ns, std::int64_t link_ns, bool was_ready) noexcept {
    queued_.fetch_sub(1, std::memory_order_relaxed);
    if (estimate_ns != 0) backlog_ns_.fetch_sub(estimate_ns, std::memory_order_relaxed);
    if (link_ns != 0) link_backlog_ns_.fetch_sub(link_ns, std::memory_order_relaxed);
    if (was_ready && estimate_ns != 0) ready_backlog_ns_.fetch_sub(estimate_ns, std::memory_order_relaxed);
  }
  DeviceSnapshot snapshot() const;
  // Records a copy between the host and this device's memory node in the
  // trace (if tracing) on `lane`, from `start_ns` until now.
  void trace_transfer(Trace* trace, bool to_device, int lane, std::size_t bytes, std::int64_t start_ns) const;
  std::size_t tasks_run() const noexcept { return tasks_run_.load(std::memory_order_relaxed); }

 protected:
  // Only before the device is in the runtime's list (a remote learns what it
  // is when it first connects); afterwards the key is read without a lock.
  void set_perf_key(std::string key) { perf_key_ = std::move(key); }
  // The same rule: a remote learns its host's measured peak when it connects.
  void set_peak(const DevicePeak& peak) { peak_ = peak; }

 private:
  DeviceId id_;
  std::string name_;
  const std::string* lasting_name_;
  DeviceKind kind_;
  MemoryNodeId node_;
  std::string perf_key_;
  DevicePeak peak_;
  std::atomic<std::size_t> queued_{0};
  std::atomic<std::int64_t> backlog_ns_{0};
  std::atomic<std::int64_t> link_backlog_ns_{0};
  std::atomic<std::int64_t> ready_backlog_ns_{0};
  std::atomic<std::size_t> tasks_run_{0};
};

}  // namespace ferry::detail
