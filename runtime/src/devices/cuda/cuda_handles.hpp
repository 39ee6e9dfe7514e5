// Owning wrappers for the CUDA objects the local GPU device uses, and the
// current-device guard every entry point takes (ferry/detail/cuda_current_device.hpp:
// the pools in allocator/src take it too).
// Only for translation units built with FERRY_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "ferry/detail/cuda_check.hpp"
#include "ferry/detail/cuda_current_device.hpp"

namespace ferry::detail {

// Non-blocking: it never waits for the legacy default stream that other
// libraries in the process may use.
class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Blocking-sync events: a thread waiting in cudaEventSynchronize sleeps
// instead of spinning on the device's progress.
class Event {
 public:
  explicit Event(bool timing = false) {
    const unsigned flags = cudaEventBlockingSync | (timing ? 0u : static_cast<unsigned>(cudaEventDisableTiming));
    check_cuda(cudaEventCreateWithFlags(&event_, flags), "cudaEventCreateWithFlags");
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  cudaEvent_t get() const noexcept { return event_; }
  void record(cudaStream_t stream) { check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord"); }
  void wait() { check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace ferry::detail
