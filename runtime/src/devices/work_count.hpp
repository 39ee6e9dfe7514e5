// The work a device has taken and not yet finished with (tasks, prefetches),
// for Device::drain(): it returns once the count is back to zero. Only the
// last one out takes the lock, so a busy device pays one atomic per item.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace ferry::detail {

class WorkCount {
 public:
  void started() noexcept { active_.fetch_add(1, std::memory_order_relaxed); }

  void finished() noexcept {
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock: a drain() between its check and its wait would
      // otherwise miss this wake-up.
      std::lock_guard lock(mutex_);
      idle_.notify_all();
    }
  }

  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }

 private:
  std::atomic<std::size_t> active_{0};
  std::mutex mutex_;
  std::condition_variable idle_;
};

}  // namespace ferry::detail
