#include "slab_registry.hpp"

#include <spdlog/spdlog.h>

#include "ferry/log.hpp"

namespace ferry::transport {

SlabRegistry::SlabRegistry(ucp_context_h context, std::function<void(std::function<void()>)> post)
    : context_(context), post_(std::move(post)) {}

SlabRegistry::~SlabRegistry() = default;

void SlabRegistry::watch(std::shared_ptr<SlabPool> pool) {
  if (!pool) return;
  {
    std::lock_guard lock(mutex_);
    for (const auto& known : pools_)
      if (known == pool) return;
    pools_.push_back(pool);
  }
  pool->add_slab_observer(*this);  // tells of the slabs it has at once
}

void SlabRegistry::on_slab_added(const Slab& slab) {
  // Device and managed memory need UCX's CUDA support, which Debian's UCX lacks.
  if (slab.kind != MemoryKind::host_pinned && slab.kind != MemoryKind::host_pageable) return;
  post_([this, slab] { map(slab); });
}

void SlabRegistry::on_slab_removed(const Slab& slab) {
  // Queued behind the slab's own map; nothing sends from it meanwhile, since
  // a pool returns only slabs no block of which is in use.
  post_([this, base = reinterpret_cast<std::uintptr_t>(slab.base)] { unmap(base); });
}

void SlabRegistry::map(const Slab& slab) {
  if (stopped_) return;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = slab.base;
  params.length = slab.bytes;
  ucp_mem_h memh = nullptr;
  const auto status = ucp_mem_map(context_, &params, &memh);
  if (status != UCS_OK) {  // not fatal: UCX registers per transfer instead, as without a pool
    log().warn("ucx: registering a {} byte slab failed ({}); transfers from it register per use", slab.bytes,
               ucs_status_string(status));
    return;
  }
  regions_[reinterpret_cast<std::uintptr_t>(slab.base)] = {slab.bytes, memh};
}

void SlabRegistry::unmap(std::uintptr_t base) {
  const auto it = regions_.find(base);
  if (it == regions_.end()) return;
  ucp_mem_unmap(context_, it->second.memh);
  regions_.erase(it);
}

ucp_mem_h SlabRegistry::find(const void* p, std::size_t bytes) const noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto it = regions_.upper_bound(address);
  if (p == nullptr || it == regions_.begin()) return nullptr;
  --it;
  return address + bytes <= it->first + it->second.bytes ? it->second.memh : nullptr;
}

void SlabRegistry::stop() {
  std::vector<std::shared_ptr<SlabPool>> pools;
  {
    std::lock_guard lock(mutex_);
    pools.swap(pools_);
  }
  for (const auto& pool : pools) pool->remove_slab_observer(*this);
  stopped_ = true;
  for (const auto& [base, region] : regions_) ucp_mem_unmap(context_, region.memh);
  regions_.clear();
}

}  // namespace ferry::transport
