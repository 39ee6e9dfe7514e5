// The host's CPU as one device with N workers in a oneTBB task_arena. A
// kernel runs on host replicas with single-threaded BLAS: parallelism comes
// from running tasks side by side. Idle workers sleep (TBB parks them).
#pragma once

#include <oneapi/tbb/concurrent_queue.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <memory>
#include <vector>

#include "devices/device.hpp"

namespace ferry::detail {

class DeviceHost;

class CpuDevice final : public Device {
 public:
  CpuDevice(DeviceHost& runtime, DeviceId id, unsigned workers);
  ~CpuDevice() override;

  bool can_run(const KernelDef& kernel) const override { return static_cast<bool>(kernel.cpu); }
  unsigned lanes() const override { return workers_; }
  void enqueue(TaskRecord* task) override;
  void drain() override;

 private:
  void run_chain(TaskRecord* task);
  void drain_ready();  // a drainer: runs queued tasks until the queue is empty
  void start_drainer();

  DeviceHost& runtime_;
  unsigned workers_;
  std::unique_ptr<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
  std::atomic<std::size_t> active_{0};  // enqueued bodies not yet returned
  // Ready tasks wait here, taken by at most one drainer per worker: a
  // flood of tasks costs one queue push each, not one oneTBB enqueue (an
  // allocation on the submitting thread freed on a worker, and a wake-up).
  tbb::concurrent_queue<TaskRecord*> ready_;
  std::atomic<unsigned> drainers_{0};
  // Drainer jobs not yet returned: a drainer still reads the queue after its
  // last task, so the device outlives them (the destructor waits).
  std::atomic<unsigned> jobs_{0};
  std::vector<int> lanes_;              // trace lane per worker slot
};

}  // namespace ferry::detail
