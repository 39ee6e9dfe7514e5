// A handle to a submitted task: wait for it, read its scalar result, ask why
// it was placed where it was. Cheap to copy; the task lives while any handle
// or the runtime needs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ferry {

namespace detail {
struct TaskRecord;
}

class Task {
 public:
  Task() = default;
  explicit Task(detail::TaskRecord* record) noexcept;  // takes a reference
  Task(const Task& other) noexcept;
  Task(Task&& other) noexcept;
  Task& operator=(Task other) noexcept;
  ~Task();

  bool valid() const noexcept { return record_ != nullptr; }
  // Blocks until the task has run; throws KernelError (naming the task and
  // its kernel) when it failed or could not run because a predecessor failed.
  void wait() const;
  // Waits at most `timeout`; true once the task has finished (then wait()
  // returns or throws at once). Lets a caller stay interruptible.
  bool wait_for(std::chrono::nanoseconds timeout) const;
  bool done() const noexcept;
  // The scalar a kernel such as dot, nrm2 or sum returns; waits first.
  double result() const;
  // Whether its kernel returns a scalar (dot, nrm2, sum): whether result() may be called.
  bool has_result() const;
  template <typename T>
  T get() const {
    return static_cast<T>(result());
  }

  std::uint64_t id() const noexcept;
  const std::string& name() const;
  const std::string& kernel() const;
  // Seconds its kernel ran (0 until done, or if it did not run).
  double run_seconds() const noexcept;
  // The device it was placed on, e.g. "cpu".
  std::string device() const;
  // The candidates and estimates behind the placement.
  std::string explain() const;
  // Calls fn once the task has finished (or failed): on the thread that
  // finishes it, or right away if it already has. fn must not block.
  void then(std::function<void(const Task&)> fn) const;

 private:
  detail::TaskRecord* record_ = nullptr;
};

}  // namespace ferry
