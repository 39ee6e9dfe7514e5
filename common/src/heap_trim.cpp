#include "ferry/heap_trim.hpp"

#include <malloc.h>

namespace ferry {

HeapTrim& HeapTrim::global() {
  static HeapTrim trim([] { ::malloc_trim(0); });
  return trim;
}

HeapTrim::HeapTrim(Trim trim) : trim_(std::move(trim)) {}

void HeapTrim::released(Clock::time_point now) noexcept {
  const Clock::rep at = now.time_since_epoch().count();
  last_.store(at, std::memory_order_relaxed);
  Clock::rep none = 0;
  first_.compare_exchange_strong(none, at, std::memory_order_relaxed);  // the burst's first, kept
  pending_.store(true, std::memory_order_release);
}

bool HeapTrim::tick(Clock::time_point now) {
  if (!pending_.load(std::memory_order_acquire)) return false;
  const Clock::time_point last{Clock::duration(last_.load(std::memory_order_relaxed))};
  const Clock::rep first = first_.load(std::memory_order_relaxed);
  const bool overdue = first != 0 && now - Clock::time_point{Clock::duration(first)} >= patience;
  if (now - last < quiet && !overdue) return false;
  // One trim per burst, whichever watcher gets here first.
  if (!pending_.exchange(false, std::memory_order_acq_rel)) return false;
  trim_now();
  return true;
}

void HeapTrim::trim_now() {
  pending_.store(false, std::memory_order_release);  // what was pending is trimmed here
  first_.store(0, std::memory_order_relaxed);
  trim_();
  trims_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ferry
