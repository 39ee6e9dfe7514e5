#include "core/host_acquisition.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/core.hpp"
#include "data/task_record.hpp"
#include "data/dependencies.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// A view runs no kernel; its record names one only for labels in messages.
std::shared_ptr<const KernelDef> view_kernel() {
  static const KernelDef def = [] {
    KernelDef d;
    d.name = "host view";
    return d;
  }();
  return std::shared_ptr<const KernelDef>(std::shared_ptr<const KernelDef>{}, &def);
}

}  // namespace

bool held_by_this_thread(const TaskRecord* task) noexcept {
  return task->view_owner != std::thread::id{} && task->view_owner == std::this_thread::get_id();
}

HostAcquisition::HostAcquisition(std::shared_ptr<RuntimeCore> core, std::shared_ptr<BufferState> view,
                                 AccessMode mode)
    : core_(core), view_(std::move(view)), record_(new TaskRecord), owner_(std::this_thread::get_id()) {
  record_->id = core->next_task_id();
  record_->core = core.get();
  record_->kernel = view_kernel();
  record_->name = fmt::format("host view of '{}'", view_->name);
  record_->view_owner = owner_;
  // Tasks another thread submitted since the caller waited: the view waits
  // for them too (a writer of the region, or any user of it for a writable view).
  bool pushed = false;
  for (TaskRecord* earlier : register_view(record_, *view_, mode)) {
    if (!held_by_this_thread(earlier) && !earlier->done.load(std::memory_order_acquire)) {
      if (!std::exchange(pushed, true)) core->push_held();
      earlier->done.wait(false, std::memory_order_acquire);
    }
    release(earlier);
  }
  core->host_views().add(this);
}

HostAcquisition::~HostAcquisition() {
  if (auto core = core_.lock()) core->host_views().remove(this);
  end();
  release(record_);
}

void HostAcquisition::end() noexcept {
  TaskRecord::Edges successors;
  {
    std::lock_guard lock(record_->mutex);
    if (record_->closed) return;
    record_->closed = true;
    successors.swap(record_->successors);
  }
  record_->done.store(true, std::memory_order_release);
  record_->done.notify_all();
  if (auto core = core_.lock()) {
    core->release_successors(std::move(successors));
    return;
  }
  for (const auto& edge : successors) release(edge.task);
}

bool HostAcquisition::ended() const noexcept { return record_->done.load(std::memory_order_acquire); }

std::string HostAcquisition::blocked_task() const {
  std::lock_guard lock(record_->mutex);
  return record_->successors.empty() ? std::string() : record_->successors.front().task->label();
}

void HostAcquisitions::add(HostAcquisition* a) {
  std::lock_guard lock(mutex_);
  live_.push_back(a);
}

void HostAcquisitions::remove(HostAcquisition* a) noexcept {
  std::lock_guard lock(mutex_);
  std::erase(live_, a);
}

namespace {

// The awaited task among those that wait, directly or through others, for
// `view`'s record; null if none. Walks successor lists one lock at a time.
const TaskRecord* awaited_behind(TaskRecord* view, std::span<const TaskRecord* const> awaited) {
  std::vector<TaskRecord*> pending{view};
  std::vector<const TaskRecord*> seen{view};
  while (!pending.empty()) {
    TaskRecord* task = pending.back();
    pending.pop_back();
    std::vector<TaskRecord*> next;
    {
      std::lock_guard lock(task->mutex);
      for (const auto& edge : task->successors) next.push_back(edge.task);
    }
    for (TaskRecord* successor : next) {
      if (std::ranges::find(awaited, successor) != awaited.end()) return successor;
      if (std::ranges::find(seen, successor) != seen.end()) continue;
      seen.push_back(successor);
      pending.push_back(successor);
    }
  }
  return nullptr;
}

}  // namespace

void HostAcquisitions::check_wait(std::string_view what, std::span<const TaskRecord* const> awaited) const {
  const auto me = std::this_thread::get_id();
  std::lock_guard lock(mutex_);
  for (const HostAcquisition* a : live_) {
    if (a->owner() != me || a->ended()) continue;
    std::string blocked;
    if (awaited.empty()) {
      blocked = a->blocked_task();
    } else if (const TaskRecord* behind = awaited_behind(a->record(), awaited)) {
      blocked = behind->label();
    }
    if (blocked.empty()) continue;
    throw UsageError(fmt::format(
        "{} would never return: this thread holds a host view of buffer '{}', and {} waits for its release; "
        "let the view go out of scope (or call its release()) before waiting",
        what, a->view().name, blocked));
  }
}

void HostAcquisitions::end_all_blocking() noexcept {
  std::lock_guard lock(mutex_);
  for (HostAcquisition* a : live_) {
    if (a->ended()) continue;
    const std::string blocked = a->blocked_task();
    if (blocked.empty()) continue;
    log().warn("the runtime closes while a host view of buffer '{}' is alive and {} waits for it: the view is "
               "released now, so writes through it race with that task",
               a->view().name, blocked);
    a->end();
  }
}

}  // namespace ferry::detail
