// Serialises every call into an upstream resource that is not thread-safe
// itself. Ferry's own pools are already safe and need no such wrapper.
#pragma once

#include <memory>
#include <mutex>

#include "ferry/allocator/memory_resource.hpp"

namespace ferry {

class SynchronizedAdaptor : public MemoryResource {
 public:
  explicit SynchronizedAdaptor(std::shared_ptr<MemoryResource> upstream);

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
  mutable std::mutex mutex_;
};

}  // namespace ferry
