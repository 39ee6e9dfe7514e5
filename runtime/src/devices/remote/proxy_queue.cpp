#include "devices/remote/proxy_queue.hpp"

#include <algorithm>
#include <utility>

namespace ferry::detail {

namespace {

// Longer than a reply takes on any link we serve; after it a proxy takes the
// job anyway and waits as before, so a reply that never comes still times out.
constexpr auto deferral_limit = std::chrono::milliseconds(500);

}  // namespace

bool ProxyQueue::takeable(const Job& job, std::chrono::steady_clock::time_point now) {
  return !job.forwarded || now - job.since >= deferral_limit ||
         job.forwarded->reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void ProxyQueue::push_task(TaskRecord* task, std::shared_ptr<ForwardedRun> forwarded) {
  bool wake = true;
  {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (forwarded) ++queued_forwarded_;
    queue_.push_back({task, false, {}, std::move(forwarded), now});
    // Decided under the lock, after the push: a reply that comes meanwhile
    // finds the job queued (reply_came), one that came before is seen here.
    wake = takeable(queue_.back(), now);
  }
  if (wake) cv_.notify_one();
}

void ProxyQueue::push_prefetch(TaskRecord* task, std::vector<std::shared_ptr<BufferState>> inputs) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({task, true, std::move(inputs), nullptr, {}});
  }
  cv_.notify_one();
}

bool ProxyQueue::take(Job& job) {
  std::unique_lock lock(mutex_);
  auto next = queue_.end();
  const auto found = [&] {
    const auto now = std::chrono::steady_clock::now();
    next = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return takeable(j, now); });
    return next != queue_.end();
  };
  for (;;) {
    if (found()) break;
    if (stopping_ && queue_.empty()) return false;
    // Deferred jobs only: a reply wakes us; the timeout is the backstop.
    if (queue_.empty()) cv_.wait(lock);
    else cv_.wait_for(lock, deferral_limit / 5);
  }
  job = std::move(*next);
  if (job.forwarded) --queued_forwarded_;
  queue_.erase(next);
  return true;
}

bool ProxyQueue::take_task(const TaskRecord* task, Job& job) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return !j.prefetch && j.task == task; });
  if (it == queue_.end()) return false;
  if (it->forwarded) --queued_forwarded_;
  job = std::move(*it);
  queue_.erase(it);
  return true;
}

void ProxyQueue::put_back(Job job) {
  {
    std::lock_guard lock(mutex_);
    if (job.forwarded) ++queued_forwarded_;
    queue_.push_front(std::move(job));
  }
  cv_.notify_one();
}

void ProxyQueue::reply_came(bool all) {
  std::lock_guard lock(mutex_);
  if (queued_forwarded_ == 0) return;
  if (all) cv_.notify_all();
  else cv_.notify_one();
}

void ProxyQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
}

}  // namespace ferry::detail
