// Device memory for the duration of one kernel call, allocated and freed in
// stream order: no synchronization, and the stream's memory pool recycles it.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>

#include "ferry/detail/cuda_check.hpp"
#include "ferry/error.hpp"

namespace ferry::kernels::cuda {

class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream, const char* purpose) : stream_(stream) {
    const cudaError_t status = cudaMallocAsync(&data_, bytes, stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so the next launch check does not report it
      throw OutOfMemory(fmt::format("{}: cudaMallocAsync of {} bytes of scratch failed: device memory exhausted",
                                    purpose, bytes),
                        bytes);
    }
    detail::check_cuda(status, "cudaMallocAsync");
  }
  // Ordered after everything already enqueued that uses the memory, so this
  // is safe on the error paths too. A failure here means the stream is
  // broken, which the next check on it reports.
  ~StreamScratch() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace ferry::kernels::cuda
