// What a device asks of the runtime that owns it, and no more: run a task's
// kernel, report it finished, hand back one it cannot run, and the trace and
// models it feeds. The runtime core implements it (RuntimeCore); devices sit
// a floor below the core and never see the rest of it (docs/architecture.md,
// "Floors").
#pragma once

#include "ferry/runtime/link_model.hpp"
#include "ferry/runtime/perf_model.hpp"
#include "ferry/runtime/trace.hpp"

namespace ferry::detail {

class Device;
struct TaskRecord;

class DeviceHost {
 public:
  // Runs a ready task's kernel on `device`, on its worker `worker` and lane `lane`.
  virtual void execute(TaskRecord* task, Device& device, int worker, int lane) = 0;
  // Records a finished (or failed, or skipped) task, releases its successors,
  // and returns one of them to run next on `current`, if any is ready there.
  virtual TaskRecord* finish(TaskRecord* task, Device* current) = 0;
  // A task `from` cannot run (it was lost): placed again, on the CPU.
  virtual void reschedule(TaskRecord* task, Device& from) = 0;
  // Before a thread blocks on tasks: what every device holds back leaves now.
  virtual void push_held() const = 0;

  // The trace, when this runtime records one; else null.
  virtual Trace* trace() const noexcept = 0;
  // Measured transfers feed the link models, measured runs the perf models.
  virtual LinkModels& links() noexcept = 0;
  virtual PerfModels& models() noexcept = 0;

 protected:
  ~DeviceHost() = default;
};

}  // namespace ferry::detail
