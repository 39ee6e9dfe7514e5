// Whether a device can take work now, and why not when it cannot: a GPU
// after a sticky CUDA error, a remote host that is not connected. The flag
// is read on every placement, so it is an atomic read; the reason is read
// by people (Runtime::devices) and written under a lock of its own.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>

namespace ferry::detail {

class DeviceHealth {
 public:
  // Which reason a device that fails again while down reports: a GPU the
  // error that broke it (what came after is its consequence), a remote host
  // the latest (why the last try to reach it failed).
  enum class Keep { first, latest };

  DeviceHealth(bool up, Keep keep) : up_(up), keep_(keep) {}

  bool up() const noexcept { return up_.load(std::memory_order_acquire); }

  // Usable again (connected): the reason it was down no longer holds.
  void restored() {
    std::lock_guard lock(mutex_);
    reason_.clear();
    up_.store(true, std::memory_order_release);
  }

  // Down for `why`; true when it was up until now, so that the caller says
  // so once however many threads meet the failure.
  bool lost(std::string why) {
    std::lock_guard lock(mutex_);
    const bool was_up = up_.exchange(false, std::memory_order_acq_rel);
    if (was_up || keep_ == Keep::latest || reason_.empty()) reason_ = std::move(why);
    return was_up;
  }

  // Why it is still down, learnt while it is (a failed reconnect).
  void still_down(std::string why) {
    std::lock_guard lock(mutex_);
    reason_ = std::move(why);
  }

  // Empty while it is up.
  std::string reason() const {
    std::lock_guard lock(mutex_);
    return up() ? std::string() : reason_;
  }

 private:
  std::atomic<bool> up_;
  const Keep keep_;
  mutable std::mutex mutex_;
  std::string reason_;
};

}  // namespace ferry::detail
