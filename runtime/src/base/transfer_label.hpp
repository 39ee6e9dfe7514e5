// What a transfer is for, for the trace: the buffer it moves and the task
// that needs it. Transfers run deep below the task (NodeLink::ship and
// fetch see only memory), so the callers that know say it for the current
// thread, and Device::trace_transfer reads it.
#pragma once

#include <string>

namespace ferry::detail {

struct TransferLabel {
  const std::string* buffer = nullptr;
  const std::string* task = nullptr;
};

inline thread_local TransferLabel current_transfer_label;

// Names the buffer of the transfers made in this scope.
class BufferLabelScope {
 public:
  explicit BufferLabelScope(const std::string& buffer) noexcept : saved_(current_transfer_label.buffer) {
    current_transfer_label.buffer = &buffer;
  }
  ~BufferLabelScope() { current_transfer_label.buffer = saved_; }
  BufferLabelScope(const BufferLabelScope&) = delete;
  BufferLabelScope& operator=(const BufferLabelScope&) = delete;

 private:
  const std::string* saved_;
};

// Names the task the transfers made in this scope are for.
class TaskLabelScope {
 public:
  explicit TaskLabelScope(const std::string& task) noexcept : saved_(current_transfer_label.task) {
    current_transfer_label.task = &task;
  }
  ~TaskLabelScope() { current_transfer_label.task = saved_; }
  TaskLabelScope(const TaskLabelScope&) = delete;
  TaskLabelScope& operator=(const TaskLabelScope&) = delete;

 private:
  const std::string* saved_;
};

}  // namespace ferry::detail
