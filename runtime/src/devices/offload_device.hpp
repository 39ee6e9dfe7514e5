// A device with memory of its own that tasks' data is copied to and kept
// on: a local GPU (cuda/cuda_device.hpp), a remote host
// (remote/remote_device.hpp). Each is a Device and the NodeLink the
// coherence layer keeps copies through; what they share is here, once:
//   - the buffers they hold a copy of (HeldRoots), evicted from the LRU way
//     when room runs out and brought home when the device goes;
//   - the work taken and not yet done (WorkCount), which drain() waits for;
//   - whether they are usable and why not (DeviceHealth);
//   - prefetching: the inputs of an assigned task, shipped while its
//     predecessors still run;
//   - a task that cannot run here: handed to the CPU, or failed when it has
//     no CPU implementation;
//   - the trace lanes of their link, copies timed onto them and into the
//     link model (record_transfer), and the link's first measurement.
// How tasks are queued and run (a GPU's streams, a remote's proxy threads)
// and how bytes move stay with each device.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/coherence.hpp"
#include "data/held_roots.hpp"
#include "devices/device.hpp"
#include "devices/device_health.hpp"
#include "devices/work_count.hpp"
#include "ferry/runtime/link_model.hpp"

namespace ferry::detail {

class DeviceHost;
struct BufferState;

class OffloadDevice : public Device, public NodeLink {
 public:
  unsigned lanes() const override = 0;
  bool available() const noexcept override { return alive(); }
  void drain() override { work_.wait_idle(); }

  // NodeLink
  MemoryNodeId node() const noexcept override { return Device::node(); }
  bool alive() const noexcept override { return health_.up(); }
  void hold(const std::shared_ptr<BufferRoot>& root) override { held_.hold(root); }

 protected:
  OffloadDevice(DeviceHost& runtime, DeviceId id, std::string name, DeviceKind kind, MemoryNodeId node,
                std::string perf_key, DevicePeak peak, DeviceHealth::Keep keep, bool up);
  ~OffloadDevice() override = default;

  DeviceHost& runtime() const noexcept { return runtime_; }
  DeviceHealth& health() noexcept { return health_; }
  const DeviceHealth& health() const noexcept { return health_; }
  WorkCount& work() noexcept { return work_; }

  // ---- held buffers ----
  // Evicts, least recently used first, until `bytes` are free; the bytes freed.
  std::size_t evict(std::size_t bytes);
  // Brings home what only this device holds and forgets every buffer: it
  // goes (`when`: at shutdown, as it leaves the pool). A buffer that cannot
  // come home is recomputed from its lineage where it has one.
  void bring_home(const char* when);

  // ---- prefetch ----
  // A task's inputs to ship early, taken when it is assigned: by the time
  // they are shipped the task may be running or finished, and finishing
  // drops the task's own list.
  struct Prefetch {
    TaskRecord* task = nullptr;  // referenced
    std::vector<std::shared_ptr<BufferState>> inputs;
  };
  // The task's inputs worth shipping (prefetchable()), taken and counted as
  // work; false when there are none (nothing taken).
  bool take_prefetch(TaskRecord* task, Prefetch& job);
  // Ships what of the job is not here yet, while that can still help.
  void run_prefetch(const Prefetch& job);
  // Done with it: drops the inputs and the task's reference, then the work.
  void finish_prefetch(Prefetch& job) noexcept;
  // Whether an input of this kind is shipped ahead at all.
  virtual bool prefetchable(const BufferState& /*view*/) const { return true; }
  // Whether there is room to ship it ahead now: a guess about the future
  // does not evict what is here.
  virtual bool room_for_prefetch(const BufferState& /*view*/) const { return true; }

  // ---- a task that cannot run here ----
  // Hands the task to the CPU (true) when it has a CPU implementation, else
  // fails it with the KernelError `failure()` says (false): the caller
  // finishes it then.
  bool fall_back(TaskRecord* task, const std::function<std::string()>& failure);

  // ---- the link ----
  // After the device's own lanes, so the trace lists them first.
  void open_link_lanes();
  // The trace lane of copies into (to_device) or out of this device.
  int link_lane(bool to_device) const noexcept { return to_device ? lane_to_ : lane_from_; }
  // When a copy started, on both clocks record_transfer wants.
  struct CopyStart {
    std::chrono::steady_clock::time_point at;
    std::int64_t trace_ns = 0;
  };
  CopyStart copy_starts() const;
  // A copy into this device's node, from `from`, or out of it to the host, ended now.
  void copied_in(std::atomic<std::size_t>& counter, const CopyStart& start, std::size_t bytes,
                 MemoryNodeId from = host_node);
  void copied_out(std::atomic<std::size_t>& counter, const CopyStart& start, std::size_t bytes);
  // The fastest of `rounds` runs of `what`, in seconds: the others carry
  // whatever else the machine was doing.
  static double fastest(int rounds, const std::function<void()>& what);
  // What the link models start from, both ways, until transfers refine it.
  void set_link(const Link& to_device, const Link& from_device);

 private:
  DeviceHost& runtime_;
  DeviceHealth health_;
  WorkCount work_;
  HeldRoots held_;
  int lane_to_ = 0, lane_from_ = 0;
};

}  // namespace ferry::detail
