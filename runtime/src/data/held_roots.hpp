// The buffers a memory node holds a copy of (NodeLink::hold), weakly: a
// buffer that dies leaves no copy anyone could ask for. What a node evicts
// from, and what it brings home when it goes.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "data/buffer_state.hpp"

namespace ferry::detail {

class HeldRoots {
 public:
  void hold(const std::shared_ptr<BufferRoot>& root) {
    std::lock_guard lock(mutex_);
    // A root that died left its address behind: a new one there replaces it.
    const auto [it, added] = held_.try_emplace(root.get(), root);
    if (!added && it->second.expired()) it->second = root;
    // Dead roots go now and then, so a node that never evicts stays small.
    if (held_.size() >= 2 * swept_size_ + 64) swept_size_ = sweep();
  }

  // The roots still alive.
  std::vector<std::shared_ptr<BufferRoot>> snapshot() {
    std::lock_guard lock(mutex_);
    return live(false);
  }

  // The roots still alive, forgetting every one.
  std::vector<std::shared_ptr<BufferRoot>> take() {
    std::lock_guard lock(mutex_);
    return live(true);
  }

 private:
  std::vector<std::shared_ptr<BufferRoot>> live(bool forget) {
    std::vector<std::shared_ptr<BufferRoot>> roots;
    for (const auto& [address, weak] : held_)
      if (auto root = weak.lock()) roots.push_back(std::move(root));
    if (forget) held_.clear();
    else swept_size_ = sweep();
    return roots;
  }
  std::size_t sweep() {
    std::erase_if(held_, [](const auto& entry) { return entry.second.expired(); });
    return held_.size();
  }

  std::mutex mutex_;
  std::unordered_map<const BufferRoot*, std::weak_ptr<BufferRoot>> held_;
  std::size_t swept_size_ = 0;
};

}  // namespace ferry::detail
