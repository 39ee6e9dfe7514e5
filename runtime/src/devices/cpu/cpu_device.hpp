// The host's CPU as one device with N workers in a oneTBB task_arena. A
// kernel runs on host replicas with single-threaded BLAS: parallelism comes
// from running tasks side by side. Idle workers sleep (TBB parks them).
#pragma once

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

  DeviceHost& runtime_;
  unsigned workers_;
  std::unique_ptr<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
  std::atomic<std::size_t> active_{0};  // enqueued bodies not yet returned
  std::vector<int> lanes_;              // trace lane per worker slot
};

}  // namespace ferry::detail
