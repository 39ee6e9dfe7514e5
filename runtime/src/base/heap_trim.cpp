#include "heap_trim.hpp"

#include <malloc.h>

namespace ferry::detail {

HeapTrim& HeapTrim::global() {
  static HeapTrim trim([] { ::malloc_trim(0); });
  return trim;
}

HeapTrim::HeapTrim(Trim trim) : trim_(std::move(trim)) {}

void HeapTrim::recovered(Clock::time_point now) noexcept {
  last_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  pending_.store(true, std::memory_order_release);
}

bool HeapTrim::tick(Clock::time_point now) {
  if (!pending_.load(std::memory_order_acquire)) return false;
  const Clock::time_point last{Clock::duration(last_.load(std::memory_order_relaxed))};
  if (now - last < quiet) return false;
  // One trim per burst, whichever watcher gets here first.
  if (!pending_.exchange(false, std::memory_order_acq_rel)) return false;
  trim_();
  return true;
}

}  // namespace ferry::detail
