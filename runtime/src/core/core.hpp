// The shared state behind a Runtime: devices, kernels, models, the trace,
// and the submit → run → finish path every task takes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "devices/device.hpp"
#include "devices/device_host.hpp"
#include "ferry/transport/worker.hpp"
#include "ferry/runtime/kernel.hpp"
#include "ferry/runtime/link_model.hpp"
#include "ferry/runtime/perf_model.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/runtime/trace.hpp"
#include "data/task_record.hpp"
#include "core/host_acquisition.hpp"

namespace ferry::detail {

// A task checked once, ready to be submitted any number of times (Graph).
struct PreparedTask {
  std::shared_ptr<const KernelDef> kernel;
  std::string name;
  KernelArgs args;  // checked, defaults filled, buffer data null
  TaskViews buffers;  // moved into the task's record: the same allocator
  RecordVector<std::uint32_t> buffer_args;
  std::size_t bytes = 0;
  Place place;
  std::uint64_t eligible = 0;  // bit i: devices()[i] may run it
  bool piece = false;          // a piece of an automatically split task: not split again

  const BufferArg& buffer_arg(std::size_t i) const { return detail::buffer_arg(args, buffer_args, i); }
  std::string label() const { return task_label(name, kernel->name); }
};

class RemotePool;

class RuntimeCore final : public DeviceHost, public std::enable_shared_from_this<RuntimeCore> {
 public:
  explicit RuntimeCore(Runtime::Options options);
  ~RuntimeCore();

  void start();  // devices; separate from the constructor so they may use shared_from_this
  void shutdown();

  // `flags.unified`: managed memory a local GPU uses in place, where this runtime
  // has a GPU; an ordinary host buffer where it has none.
  std::shared_ptr<BufferState> make_buffer(DType dtype, std::size_t rows, std::size_t cols, BufferFlags flags);

  // This runtime's kernels first, then the global registry; null if unknown.
  std::shared_ptr<const KernelDef> find_kernel(std::string_view name) const;
  std::vector<std::string> kernel_names() const;
  KernelRef add_kernel(KernelDef def);

  // Checks everything about a call; throws UsageError naming task, kernel and argument.
  PreparedTask prepare(std::shared_ptr<const KernelDef> kernel, Submission submission) const;
  Task submit(const PreparedTask& prepared);  // a Graph's task, submitted again
  Task submit(PreparedTask&& prepared);       // a one-off task: its arguments move in
  void wait_all();
  void wait_idle() noexcept;
  bool wait_all_for(std::chrono::nanoseconds timeout);  // false: still busy

  // Runs a ready task's kernel on `device` (called by the device).
  void execute(TaskRecord* task, Device& device, int worker, int lane) override;
  // Records a finished (or failed, or skipped) task, releases its successors,
  // and returns one of them to run next on `current`, if any is ready there.
  TaskRecord* finish(TaskRecord* task, Device* current) override;

  std::uint64_t id() const noexcept { return id_; }
  const Runtime::Options& options() const noexcept { return options_; }
  const std::shared_ptr<MemoryResource>& host_memory() const noexcept { return memory_; }
  // The device table: it only grows (a remote leaving the pool is retired,
  // not removed), so a task's device mask stays valid; read without a lock.
  std::span<const std::unique_ptr<Device>> devices() const noexcept {
    return {device_slots_.data(), device_count_.load(std::memory_order_acquire)};
  }
  // Makes the next device with make(id) and publishes it; throws UsageError
  // when the table (64) is full, or what make throws (nothing is added).
  Device& add_device(const std::function<std::unique_ptr<Device>(DeviceId)>& make);
  // The UCX worker hosts that dial in arrive on (the listener's), made on
  // first use; a host this runtime dials gets a new_worker() per connection
  // (remote_device.hpp says why).
  std::shared_ptr<transport::Worker> worker();
  // A UCX worker with the host pool registered: what bulk transfers send from and land in.
  std::shared_ptr<transport::Worker> new_worker();
  RemotePool& remote_pool() noexcept { return *pool_; }
  PerfModels& models() noexcept override { return models_; }
  LinkModels& links() noexcept override { return links_; }
  // Before a thread blocks on tasks: what devices hold back leaves now
  // (a chain's last forward must not wait for company that never comes).
  void push_held() const override {
    for (const auto& device : devices()) device->push();
  }
  // Hands a task its device could not run (a lost remote) to the CPU.
  void reschedule(TaskRecord* task, Device& from) override;
  Device* find_device(std::string_view name) const noexcept;
  Trace* trace() const noexcept override { return trace_.get(); }
  void release_task(TaskRecord* task) noexcept;
  std::uint64_t next_task_id() noexcept { return next_task_id_.fetch_add(1, std::memory_order_relaxed); }
  // The live host views (core/host_acquisition.hpp).
  HostAcquisitions& host_views() noexcept { return host_views_; }
  // A host view ended: the tasks that waited only for it become ready.
  void release_successors(TaskRecord::Edges successors);
  // Work done again because a device was lost (Runtime::recovery()).
  void count_replay(std::int64_t ns) noexcept {
    replays_.fetch_add(1, std::memory_order_relaxed);
    replay_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  Runtime::Recovery recovery() const noexcept;

 private:
  // prepare()'s three phases: the arguments read and checked against the
  // kernel, no written buffer aliased by another argument, the devices that
  // may run it.
  void collect_arguments(PreparedTask& p, Submission& submission) const;
  static void check_aliasing(const PreparedTask& p);
  void find_eligible_devices(PreparedTask& p) const;
  void place_elsewhere(PreparedTask& p) const;
  void ready(TaskRecord* task, Device* current, TaskRecord*& bypass, std::vector<TaskRecord*>& skipped);
  template <typename Prepared>
  Task launch(Prepared&& prepared);
  void place(TaskRecord* task, std::uint64_t eligible);
  void fail_skipped(TaskRecord* task);
  void start_gpus();
  // The CUDA ordinals of this runtime's GPUs.
  std::vector<int> gpu_ordinals() const;
  // Managed memory for unified buffers (made on first use); null without a GPU.
  std::shared_ptr<MemoryResource> unified_memory();

  std::uint64_t id_;
  Runtime::Options options_;
  // This runtime's own compiles of CUDA source at definition (add_kernel).
  CompileBudget compiles_{options_.compile_limit};
  std::shared_ptr<MemoryResource> memory_;
  std::mutex unified_mutex_;
  std::shared_ptr<MemoryResource> unified_memory_;
  bool unified_checked_ = false;
  std::mutex worker_mutex_;
  std::shared_ptr<transport::Worker> worker_;  // declared before the devices: outlives them
  std::mutex devices_mutex_;                   // writers of the table
  std::vector<std::unique_ptr<Device>> device_slots_;  // 64, sized once
  std::atomic<std::size_t> device_count_{0};
  std::unique_ptr<RemotePool> pool_;
  mutable std::mutex kernels_mutex_;
  std::map<std::string, std::shared_ptr<const KernelDef>, std::less<>> kernels_;  // this runtime's own
  PerfModels models_;
  LinkModels links_;
  std::unique_ptr<Trace> trace_;
  std::mutex rng_mutex_;
  std::mt19937_64 rng_;

  HostAcquisitions host_views_;
  std::atomic<std::uint64_t> next_task_id_{1};
  std::atomic<std::uint64_t> next_buffer_id_{1};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<int> waiters_{0};
  std::atomic<std::uint64_t> placed_again_{0}, replays_{0};
  std::atomic<std::int64_t> placed_again_ns_{0}, replay_ns_{0};
  std::mutex wait_mutex_;
  std::condition_variable wait_cv_;
  std::mutex error_mutex_;
  // Pinned places already warned about as down (RemotePolicy::prefer): once each.
  mutable std::mutex down_pins_mutex_;
  mutable std::vector<std::string> down_pins_warned_;
  std::exception_ptr first_error_;
  // The task whose error first_error_ is (referenced): a Task::wait on it
  // reports it too, so shutdown warns only about a failure nothing raised.
  TaskRecord* first_failed_ = nullptr;
  bool shut_down_ = false;
};

}  // namespace ferry::detail
