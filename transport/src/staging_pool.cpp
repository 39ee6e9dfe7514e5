#include "staging_pool.hpp"

#include <algorithm>

namespace ferry::transport {

StagingPool::StagingPool(std::size_t keep_bytes, std::size_t min_bytes)
    : state_(std::make_shared<State>()), min_bytes_(min_bytes) {
  state_->keep_bytes = keep_bytes;
}

std::shared_ptr<std::byte[]> StagingPool::take(std::size_t bytes) {
  if (bytes < min_bytes_ || bytes > state_->keep_bytes) return std::shared_ptr<std::byte[]>(new std::byte[bytes]);
  std::unique_ptr<std::byte[]> data;
  std::size_t capacity = 0;
  {
    std::lock_guard lock(state_->mutex);
    auto& idle = state_->idle;
    // The smallest that fits, and not one twice the size: a 64 MiB buffer
    // kept for a 100 KiB message would hold memory the next large one wants.
    auto best = idle.end();
    for (auto it = idle.begin(); it != idle.end(); ++it)
      if (it->capacity >= bytes && it->capacity / 2 <= bytes && (best == idle.end() || it->capacity < best->capacity))
        best = it;
    if (best != idle.end()) {
      capacity = best->capacity;
      data = std::move(best->data);
      state_->idle_bytes -= capacity;
      idle.erase(best);
    }
  }
  if (!data) {
    capacity = bytes;
    data.reset(new std::byte[bytes]);
  }
  std::weak_ptr<State> weak = state_;
  return std::shared_ptr<std::byte[]>(data.release(), [weak, capacity](std::byte* p) {
    if (auto state = weak.lock()) return state->give_back(p, capacity);
    delete[] p;
  });
}

void StagingPool::State::give_back(std::byte* data, std::size_t capacity) {
  std::unique_ptr<std::byte[]> owned(data);
  std::lock_guard lock(mutex);
  // Over the limit, the oldest idle buffers go first: the newest is the one
  // whose pages are warm.
  while (!idle.empty() && idle_bytes + capacity > keep_bytes) {
    idle_bytes -= idle.front().capacity;
    idle.erase(idle.begin());
  }
  if (capacity > keep_bytes) return;
  idle_bytes += capacity;
  idle.push_back({capacity, std::move(owned)});
}

std::size_t StagingPool::idle_bytes() const {
  std::lock_guard lock(state_->mutex);
  return state_->idle_bytes;
}

}  // namespace ferry::transport
