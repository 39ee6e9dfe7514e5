// The pinned pools' slabs, registered with UCX once each (ucp_mem_map) for
// as long as they exist, so a send from or a receive into pooled memory
// hands UCX its memory handle and RDMA transports skip the registration
// they would otherwise do (or look up in their cache) per transfer.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ferry/allocator/slab_pool.hpp"

namespace ferry::transport {

class SlabRegistry final : public SlabObserver {
 public:
  // post(fn) runs fn on the worker's progress thread: the context is
  // single-threaded (mt_workers_shared = 0), so every ucp_mem_map and
  // ucp_mem_unmap happens there, in the order the pools report slabs.
  SlabRegistry(ucp_context_h context, std::function<void(std::function<void()>)> post);
  ~SlabRegistry() override;

  // Any thread: registers the pool's slabs now and as it grows; keeps the
  // pool alive until stop().
  void watch(std::shared_ptr<SlabPool> pool);

  // Called by the pools under their locks: only queue work.
  void on_slab_added(const Slab& slab) override;
  void on_slab_removed(const Slab& slab) override;

  // Progress thread only. The handle of the registered slab holding all of
  // [p, p + bytes), or nullptr.
  ucp_mem_h find(const void* p, std::size_t bytes) const noexcept;
  std::size_t registered() const noexcept { return regions_.size(); }
  // Progress thread only, before the context goes: leaves every pool and
  // unregisters every slab.
  void stop();

 private:
  void map(const Slab& slab);
  void unmap(std::uintptr_t base);

  struct Region {
    std::size_t bytes;
    ucp_mem_h memh;
  };
  ucp_context_h context_;
  std::function<void(std::function<void()>)> post_;
  std::mutex mutex_;  // guards pools_
  std::vector<std::shared_ptr<SlabPool>> pools_;
  std::map<std::uintptr_t, Region> regions_;  // progress thread only
  bool stopped_ = false;                      // progress thread only
};

}  // namespace ferry::transport
