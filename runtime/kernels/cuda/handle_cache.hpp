// Library handles (cuBLAS, cuSOLVER) cached per stream. A stream is known by
// its address and by the id CUDA gives it (cudaStreamGetId, never reused in
// a process): a destroyed stream's address can come back for a new stream,
// and a handle bound to the old one must not serve it. Seeing a new id at a
// known address proves the old stream gone, so its handle is destroyed there
// and then; executors also release their streams' handles before destroying
// them. Independent of CUDA so the keying is testable on any machine.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace ferry::kernels::cuda {

struct StreamKey {
  int device = -1;
  const void* stream = nullptr;
  friend auto operator<=>(const StreamKey&, const StreamKey&) = default;
};

template <typename Handle>
class HandleCache {
 public:
  // `create()` makes a handle for the stream `id` names; `destroy(handle)`
  // frees one whose stream is gone. Creation happens under the lock: it is
  // rare (once per stream) and two threads must not both create one.
  template <typename Create, typename Destroy>
  Handle get(StreamKey key, std::uint64_t id, Create create, Destroy destroy) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.id == id) return it->second.handle;
      destroy(it->second.handle);  // the address's earlier stream: gone
      entries_.erase(it);
    }
    const Handle handle = create();
    entries_.emplace(key, Entry{id, handle});
    return handle;
  }

  // For a stream about to be destroyed, its work finished.
  template <typename Destroy>
  void release(StreamKey key, Destroy destroy) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    destroy(it->second.handle);
    entries_.erase(it);
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::uint64_t id = 0;
    Handle handle{};
  };
  mutable std::mutex mutex_;
  std::map<StreamKey, Entry> entries_;
};

}  // namespace ferry::kernels::cuda
