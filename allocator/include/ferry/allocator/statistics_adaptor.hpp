// Counts what passes through to an upstream resource: bytes in use, their
// peak, and the number of allocations. Exact under concurrency; it counts the
// bytes callers asked for, not the pool's rounding.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "ferry/allocator/memory_resource.hpp"

namespace ferry {

class StatisticsAdaptor : public MemoryResource {
 public:
  struct Stats {
    std::size_t bytes_in_use = 0;
    std::size_t peak_bytes = 0;
    std::size_t blocks_in_use = 0;
    std::size_t allocations = 0;    // successful, over the adaptor's life
    std::size_t deallocations = 0;
  };

  explicit StatisticsAdaptor(std::shared_ptr<MemoryResource> upstream);

  Stats stats() const noexcept;
  // Sets the peak to the bytes in use now, to measure one phase at a time.
  void reset_peak() noexcept;
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
  std::atomic<std::size_t> bytes_in_use_{0};
  std::atomic<std::size_t> peak_bytes_{0};
  std::atomic<std::size_t> blocks_in_use_{0};
  std::atomic<std::size_t> allocations_{0};
  std::atomic<std::size_t> deallocations_{0};
};

}  // namespace ferry
