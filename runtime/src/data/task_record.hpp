// A submitted task's state, shared by its handles, its predecessors (which
// hold it in their successor lists) and the device running it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/task_label.hpp"
#include "ferry/allocator/small_objects.hpp"
#include "data/buffer_state.hpp"
#include "ferry/runtime/kernel.hpp"
#include "base/buffer_args.hpp"

namespace ferry {
class Task;
}

namespace ferry::detail {

class RuntimeCore;
class Device;

// A record's lists are filled on the submitting thread and freed with the
// record on a worker or a proxy, like the record itself: from the pool of
// small objects (ferry/allocator/small_objects.hpp).
template <class T>
using RecordAllocator = SmallObjectAllocator<T>;
template <class T>
using RecordVector = std::vector<T, RecordAllocator<T>>;
// The buffers (views) a task uses: made with the call, freed by whoever
// finishes the task.
using TaskViews = RecordVector<std::shared_ptr<BufferState>>;
// For maps keyed by task that are written on the submitting thread and
// erased on another (a remote's forwarded runs).
template <class K, class V>
using RecordMap = std::unordered_map<K, V, std::hash<K>, std::equal_to<K>, RecordAllocator<std::pair<const K, V>>>;

struct TaskRecord {
  // Made on the submitting thread, freed on a worker: a small object.
  static void* operator new(std::size_t bytes) { return small_object_allocate(bytes, alignof(TaskRecord)); }
  static void operator delete(void* ptr, std::size_t bytes) noexcept { small_object_deallocate(ptr, bytes); }

  std::atomic<int> refs{1};
  std::uint64_t id = 0;
  RuntimeCore* core = nullptr;
  std::string name;
  std::shared_ptr<const KernelDef> kernel;
  KernelArgs args;
  // The buffers among args, in order, with their argument positions.
  TaskViews buffers;
  RecordVector<std::uint32_t> buffer_args;
  std::size_t bytes = 0;  // what the call touches: the perf-model size

  Device* device = nullptr;
  std::uint64_t eligible = 0;  // bit i: devices()[i] may run it (where a lost device's task may go)
  const std::string* device_name = nullptr;  // lasting_name(): outlives the device, for handles kept past the runtime
  std::int64_t estimate_ns = 0;  // counted in the device's expected backlog until done
  std::int64_t link_ns = 0;      // counted in a remote's link backlog until done
  bool counted_ready = false;    // estimate_ns counted in its device's ready backlog too
  // Placed again because its device was lost (RuntimeCore::reschedule): its
  // run there, if it ran, was lost; Runtime::recovery() counts this one.
  bool placed_again = false;
  // When placement expected it done (steady clock, ns; 0: not estimated):
  // its readers' inputs are ready then, not at once.
  std::int64_t expected_finish_ns = 0;
  std::string explanation;
  // Split automatically: its pieces run, it only waits for them (core/chunked_submission.hpp).
  bool join = false;

  // Unfinished predecessors, plus one held by submit until all edges exist.
  std::atomic<int> pending{1};
  // One predecessor fewer; true when that made the task ready. A submitting
  // thread that waits for a task's predecessors from inside its launch
  // (RemoteDevice::checkpoint_before_forwarding) blocks on `pending` and is
  // woken when only the launch's own count is left: no poll, no sleep that
  // outlasts the wait. notify_all costs a load when nobody waits.
  bool predecessor_finished() noexcept {
    const int before = pending.fetch_sub(1, std::memory_order_acq_rel);
    if (before == 2) pending.notify_all();
    return before == 1;
  }
  std::mutex mutex;
  bool closed = false;  // finished: no more successors may attach
  struct Edge {
    TaskRecord* task;
    bool data;  // the successor reads what this task writes: a failure here spoils it
    // Released when this task was launched, ordered behind it on its GPU
    // stream (CudaDevice::release_ordered): finishing does not release it again.
    bool ordered = false;
  };
  using Edges = RecordVector<Edge>;
  Edges successors;
  std::atomic<TaskRecord*> failed_input{nullptr};  // a predecessor that failed (referenced)
  // Ordering on a GPU's stream instead of by completion (CudaDevice): a
  // task enqueued on stream `launched_lane` of its GPU (under mutex, until
  // it finishes) lets a successor on that GPU follow it there at once. The
  // successor records it (referenced) and that stream: it must run there,
  // and a fallback off the stream waits for it to finish first.
  int launched_lane = -1;
  std::atomic<TaskRecord*> ordered_after{nullptr};
  int ordered_lane = -1;
  // Ids of the predecessors this task had to wait for when it was submitted
  // (written only while it is submitted): a remote forwards it behind them.
  // Left empty for a task placed on the CPU, which no remote ever runs.
  RecordVector<std::uint64_t> waits_on;
  // Set for a host view's record (core/host_acquisition.hpp): the thread holding it.
  std::thread::id view_owner;

  std::atomic<bool> done{false};
  std::exception_ptr error;
  // A wait on this task, or on one that failed because of it, rethrew the
  // error: the shutdown warning about unreported failures leaves it out.
  std::atomic<bool> error_reported{false};
  std::optional<double> result;

  // Called with a handle to the task, made once for all of them: a
  // continuation holding its own handle would not fit std::function's
  // inline buffer, one allocation more per Task::then.
  using Continuations = RecordVector<std::function<void(const Task&)>>;
  Continuations continuations;  // Task::then (and a forwarded run's cleanup), under mutex until closed
  std::vector<std::uint64_t> predecessors;  // kept only when tracing
  std::int64_t start_ns = 0, end_ns = 0;

  bool failed() const noexcept { return error != nullptr; }
  // The i-th buffer argument, the one buffers[i] is passed as.
  BufferArg& buffer_arg(std::size_t i) { return detail::buffer_arg(args, buffer_args, i); }
  const BufferArg& buffer_arg(std::size_t i) const { return detail::buffer_arg(args, buffer_args, i); }
  // "task 'x' (kernel y)", for messages.
  std::string label() const { return task_label(name, kernel->name); }
};

inline void retain(TaskRecord* task) noexcept { task->refs.fetch_add(1, std::memory_order_relaxed); }
void release(TaskRecord* task) noexcept;

// Makes `succ` wait for `pred` unless pred is already finished; returns
// whether an edge was added. For a data edge (succ reads what pred writes) a
// failed pred marks succ as unable to run.
bool add_edge(TaskRecord* pred, TaskRecord* succ, bool data);
// Whether `succ` may be ordered behind `pred` on pred's GPU stream before
// pred finishes (see launched_lane). The coherence layer learns what pred
// wrote only when it completes, so succ must find its data where pred left
// it, without a copy being made: every region both touch is the same region
// (the same copy on that GPU), and nothing is unified (its pages move on
// the host's say). Claims succ for pred (ordered_after) when it may.
bool follow_on_stream(TaskRecord* pred, TaskRecord* succ) noexcept;
// Records that `pred` failed before `succ` could use its output.
void mark_failed_input(TaskRecord* succ, TaskRecord* pred) noexcept;

}  // namespace ferry::detail
