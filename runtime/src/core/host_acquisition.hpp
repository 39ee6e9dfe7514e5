// A host view's hold on its buffer, StarPU's acquire/release: while a view
// lives, it is a node of the dependency graph like a task that has not
// finished. A task submitted later that conflicts with it (writes the
// region, or touches it at all while the view is writable) waits for the
// view's release, so writes through a view kept across submit happen
// before the task, never during it. Views on one thread do not wait for
// each other (they are ordered by the program). Waiting for tasks on the
// thread that holds a view they wait behind would never end: it is refused.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/buffer_state.hpp"
#include "ferry/runtime/access.hpp"

namespace ferry::detail {

class RuntimeCore;
struct TaskRecord;

// One live view: registered in the root's access history as `record`.
class HostAcquisition {
 public:
  HostAcquisition(std::shared_ptr<RuntimeCore> core, std::shared_ptr<BufferState> view, AccessMode mode);
  HostAcquisition(const HostAcquisition&) = delete;
  HostAcquisition& operator=(const HostAcquisition&) = delete;
  ~HostAcquisition();

  // Lets the tasks waiting for this view run; idempotent.
  void end() noexcept;
  bool ended() const noexcept;
  // The first task waiting for this view, or empty if none.
  std::string blocked_task() const;
  const BufferState& view() const noexcept { return *view_; }
  std::thread::id owner() const noexcept { return owner_; }
  TaskRecord* record() const noexcept { return record_; }

 private:
  std::weak_ptr<RuntimeCore> core_;
  std::shared_ptr<BufferState> view_;
  TaskRecord* record_;
  std::thread::id owner_;
};

// The live views of one runtime, so a wait can tell it would wait for itself.
class HostAcquisitions {
 public:
  void add(HostAcquisition* a);
  void remove(HostAcquisition* a) noexcept;
  // Throws UsageError, naming the buffer and the task, when the calling
  // thread holds a view that a task waits behind: `what` is the wait. With
  // `awaited`, only when one of those tasks waits (directly or through
  // others) behind such a view; without, when any task does (a wait for all).
  void check_wait(std::string_view what, std::span<const TaskRecord* const> awaited = {}) const;
  // At shutdown: ends every view tasks still wait for (they would never run).
  void end_all_blocking() noexcept;

 private:
  mutable std::mutex mutex_;
  std::vector<HostAcquisition*> live_;
};

// Whether `task` is a live view of the calling thread (acquire_host does not wait for those).
bool held_by_this_thread(const TaskRecord* task) noexcept;

}  // namespace ferry::detail
