// Device memory for the duration of one kernel call, from the device's
// DevicePool (ExecContext::scratch) in stream order: no synchronization, the
// pool recycles it, and it counts against the same bound as the replicas
// (at the bound the pool evicts replicas before it fails). Not the device's
// default pool: that one releases everything at each synchronization and
// knows nothing of Ferry's bound.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>

#include "ferry/allocator/memory_resource.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels::cuda {

class StreamScratch {
 public:
  // Throws OutOfMemory when the pool cannot make room, UsageError when the
  // caller gave no pool.
  StreamScratch(const ExecContext& ctx, std::size_t bytes, const char* purpose)
      : pool_(ctx.scratch), bytes_(bytes), stream_(ctx.stream) {
    if (pool_ == nullptr)
      throw UsageError(fmt::format("{}: a CUDA variant needs ExecContext::scratch (the device's DevicePool) for "
                                   "its temporary memory",
                                   purpose));
    data_ = pool_->allocate(bytes_, default_alignment, StreamRef{stream_});
  }
  // Ordered after everything already enqueued that uses the memory, so this
  // is safe on the error paths too. A failure here means the stream is
  // broken, which the next check on it reports.
  ~StreamScratch() {
    try {
      pool_->deallocate(data_, bytes_, StreamRef{stream_});
    } catch (...) {
    }
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  MemoryResource* pool_;
  std::size_t bytes_;
  void* stream_;
  void* data_ = nullptr;
};

}  // namespace ferry::kernels::cuda
