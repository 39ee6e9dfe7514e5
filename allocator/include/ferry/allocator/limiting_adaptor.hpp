// Caps the bytes in use through it; a request that would cross the cap
// throws OutOfMemory naming the request, the cap and the upstream's state.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "ferry/allocator/memory_resource.hpp"

namespace ferry {

class LimitingAdaptor : public MemoryResource {
 public:
  LimitingAdaptor(std::shared_ptr<MemoryResource> upstream, std::size_t cap_bytes);

  std::size_t cap() const noexcept { return cap_; }
  std::size_t bytes_in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  MemoryResource& upstream() const noexcept { return *upstream_; }

  MemoryKind kind() const noexcept override { return upstream_->kind(); }
  int device() const noexcept override { return upstream_->device(); }
  std::string describe() const override;

 protected:
  void* do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) override;
  bool do_is_equal(const MemoryResource& other) const noexcept override;

 private:
  std::shared_ptr<MemoryResource> upstream_;
  std::size_t cap_;
  std::atomic<std::size_t> in_use_{0};
};

}  // namespace ferry
