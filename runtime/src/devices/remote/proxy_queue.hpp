// The jobs a remote device's proxy threads take: tasks to run there and
// prefetches to ship. A forwarded task whose reply has not come when it is
// queued wakes no proxy, since one would only wake to wait for the reply
// (or the task's waiter takes it, RemoteDevice::run_for_waiter); its reply
// does (reply_came), or a proxy takes it after deferral_limit anyway.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/remote/forwarded_run.hpp"

namespace ferry::detail {

class ProxyQueue {
 public:
  struct Job {
    TaskRecord* task = nullptr;
    bool prefetch = false;  // ship the task's inputs early, do not run it
    // For a prefetch: the views it reads, taken at assignment, because the
    // task may finish (and drop its buffer list) while the prefetch still runs.
    std::vector<std::shared_ptr<BufferState>> inputs;
    std::shared_ptr<ForwardedRun> forwarded;  // a task sent ahead
    std::chrono::steady_clock::time_point since{};
  };

  // A ready task, with its forwarded run if it was sent ahead.
  void push_task(TaskRecord* task, std::shared_ptr<ForwardedRun> forwarded);
  void push_prefetch(TaskRecord* task, std::vector<std::shared_ptr<BufferState>> inputs);
  // Blocks until a job may be taken, and takes it; false once stopped with nothing queued.
  bool take(Job& job);
  // The task's job (not a prefetch) if no proxy has taken it yet.
  bool take_task(const TaskRecord* task, Job& job);
  // A job taken by take_task goes back to the front (its waiter gave up).
  void put_back(Job job);
  // A reply came (or every reply failed: `all`): wake a proxy for a deferred job.
  void reply_came(bool all);
  // Proxies return once nothing is queued.
  void stop();

 private:
  // Under mutex_: a proxy may take it now.
  static bool takeable(const Job& job, std::chrono::steady_clock::time_point now);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::size_t queued_forwarded_ = 0;  // jobs with `forwarded` set: reply_came need not scan
  bool stopping_ = false;
};

}  // namespace ferry::detail
