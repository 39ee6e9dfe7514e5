#include "ferry/runtime/task.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/core.hpp"
#include "ferry/log.hpp"
#include "devices/device.hpp"
#include "ferry/error.hpp"
#include "data/task_record.hpp"
#include "data/buffer_state.hpp"

namespace ferry {

namespace detail {

void release(TaskRecord* task) noexcept {
  if (task->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (TaskRecord* failed = task->failed_input.load(std::memory_order_relaxed)) release(failed);
  if (TaskRecord* before = task->ordered_after.load(std::memory_order_relaxed)) release(before);  // never ran
  for (auto& edge : task->successors) release(edge.task);
  delete task;
}

void mark_failed_input(TaskRecord* succ, TaskRecord* pred) noexcept {
  TaskRecord* expected = nullptr;
  retain(pred);
  if (!succ->failed_input.compare_exchange_strong(expected, pred, std::memory_order_acq_rel)) release(pred);
}

bool follow_on_stream(TaskRecord* pred, TaskRecord* succ) noexcept {
  if (succ->device != pred->device || !succ->kernel->cuda || succ->join ||
      succ->failed_input.load(std::memory_order_acquire) != nullptr)
    return false;
  for (const auto& b : succ->buffers) {
    if (b->root->unified) return false;
    for (const auto& a : pred->buffers)
      if (a->root == b->root && a->region.overlaps(b->region) && !(a->region == b->region)) return false;
  }
  // One stream per task: the first predecessor to claim it orders it.
  TaskRecord* expected = nullptr;
  if (succ->ordered_after.compare_exchange_strong(expected, pred, std::memory_order_acq_rel)) {
    retain(pred);
    succ->ordered_lane = pred->launched_lane;
    return true;
  }
  return expected == pred;
}

bool add_edge(TaskRecord* pred, TaskRecord* succ, bool data) {
  // The trace wants the dependency even when pred is already done: it is
  // still a link of the critical path.
  if (succ->core != nullptr && succ->core->trace() != nullptr) succ->predecessors.push_back(pred->id);
  std::lock_guard lock(pred->mutex);
  if (pred->closed) {
    if (data && pred->failed()) mark_failed_input(succ, pred);
    return false;
  }
  retain(succ);
  if (pred->launched_lane >= 0 && follow_on_stream(pred, succ)) {
    // Already on its GPU's stream: succ goes behind it there, uncounted.
    pred->successors.push_back({succ, data, true});
    return true;
  }
  // Count first: pred cannot finish (and decrement) while we hold its lock.
  succ->pending.fetch_add(1, std::memory_order_relaxed);
  pred->successors.push_back({succ, data});
  // Only a remote forwards behind them; a task placed on the CPU never moves
  // (only a remote or a GPU gives its tasks back to be placed again).
  if (succ->device == nullptr || succ->device->kind() != DeviceKind::cpu) succ->waits_on.push_back(pred->id);
  return true;
}

}  // namespace detail

Task::Task(detail::TaskRecord* record) noexcept : record_(record) {
  if (record_ != nullptr) detail::retain(record_);
}
Task::Task(const Task& other) noexcept : Task(other.record_) {}
Task::Task(Task&& other) noexcept : record_(std::exchange(other.record_, nullptr)) {}
Task& Task::operator=(Task other) noexcept {
  std::swap(record_, other.record_);
  return *this;
}
Task::~Task() {
  if (record_ != nullptr) detail::release(record_);
}

namespace {
detail::TaskRecord& require(detail::TaskRecord* record) {
  if (record == nullptr) throw UsageError("this Task is empty (default-constructed or moved from)");
  return *record;
}
}  // namespace

void Task::wait() const {
  detail::TaskRecord& r = require(record_);
  if (!r.done.load(std::memory_order_acquire) && r.core != nullptr) {
    const detail::TaskRecord* awaited[] = {&r};
    r.core->host_views().check_wait("Task::wait()", awaited);
    r.core->push_held();
    // The task's device is read by trying each: a task handed elsewhere
    // (a lost remote's to the CPU) changes it on another thread.
    for (const auto& device : r.core->devices())
      if (r.done.load(std::memory_order_acquire) || device->run_for_waiter(&r)) break;
  }
  r.done.wait(false, std::memory_order_acquire);
  if (r.error) {
    // Reported here, with its causes (whose messages a skipped task's carries).
    for (detail::TaskRecord* t = &r; t != nullptr; t = t->failed_input.load(std::memory_order_acquire))
      t->error_reported.store(true, std::memory_order_release);
    std::rethrow_exception(r.error);
  }
}

bool Task::wait_for(std::chrono::nanoseconds timeout) const {
  detail::TaskRecord& r = require(record_);
  if (r.done.load(std::memory_order_acquire)) return true;
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  const auto deadline = timeout >= Clock::time_point::max() - now ? Clock::time_point::max()
                                                                  : now + std::chrono::duration_cast<Clock::duration>(timeout);
  if (r.core != nullptr) {
    const detail::TaskRecord* awaited[] = {&r};
    r.core->host_views().check_wait("Task::wait_for()", awaited);
    r.core->push_held();
    // As wait() does, the waiter may take its own reply, until the deadline
    // (Python's result() waits in slices, to answer Ctrl-C between them).
    for (const auto& device : r.core->devices())
      if (r.done.load(std::memory_order_acquire) || device->run_for_waiter(&r, deadline)) break;
    if (r.done.load(std::memory_order_acquire)) return true;
    if (deadline != Clock::time_point::max())
      timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now());
    if (timeout <= std::chrono::nanoseconds::zero()) return false;
  }
  // Atomics have no timed wait: a continuation signals a condition variable.
  struct Signal {
    std::mutex mutex;
    std::condition_variable cv;
    bool fired = false;
  };
  auto signal = std::make_shared<Signal>();
  then([signal](const Task&) {
    std::lock_guard lock(signal->mutex);
    signal->fired = true;
    signal->cv.notify_all();
  });
  std::unique_lock lock(signal->mutex);
  return signal->cv.wait_for(lock, timeout, [&] { return signal->fired; });
}

bool Task::done() const noexcept { return record_ != nullptr && record_->done.load(std::memory_order_acquire); }

double Task::result() const {
  wait();
  if (!record_->kernel->returns_scalar) throw UsageError(fmt::format("{} returns no scalar result", record_->label()));
  return record_->result.value_or(0.0);
}

bool Task::has_result() const { return require(record_).kernel->returns_scalar; }

double Task::run_seconds() const noexcept {
  if (record_ == nullptr || !record_->done.load(std::memory_order_acquire)) return 0.0;
  return static_cast<double>(record_->end_ns - record_->start_ns) * 1e-9;
}

std::uint64_t Task::id() const noexcept { return record_ != nullptr ? record_->id : 0; }
const std::string& Task::name() const { return require(record_).name; }
const std::string& Task::kernel() const { return require(record_).kernel->name; }
std::string Task::device() const {
  const auto& name = require(record_).device_name;
  return name ? *name : std::string();
}
void Task::then(std::function<void(const Task&)> fn) const {
  detail::TaskRecord& r = require(record_);
  {
    std::lock_guard lock(r.mutex);
    if (!r.closed) {
      r.continuations.push_back(std::move(fn));
      return;
    }
  }
  r.done.wait(false, std::memory_order_acquire);
  fn(*this);
}

std::string Task::explain() const {
  const detail::TaskRecord& r = require(record_);
  if (!r.explanation.empty()) return r.explanation;
  return fmt::format("{}: the only device of this runtime that can run kernel '{}' where the task allows",
                     r.device_name ? *r.device_name : "?",
                     r.kernel->name);
}

}  // namespace ferry
