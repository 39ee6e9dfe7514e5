// Host <-> device copies for one local GPU, on its own copy streams (one
// per direction), so transfers overlap the kernels on the compute streams.
// Every call blocks until its data has arrived: callers (the coherence
// layer) hand the memory on at once.
//
// Host memory that is page-locked (a PinnedPool's replicas where a driver is
// present) or managed goes by DMA straight from where it lies, a tile as a
// 2-D copy, in chunks of `chunk_bytes`. Pageable memory goes through a ring
// of `slots` pinned staging buffers of chunk_bytes each: the host packs
// chunk i+1 while the copy engine moves chunk i.
//
// Only for translation units built with FERRY_WITH_CUDA.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "data/coherence.hpp"
#include "devices/cuda/cuda_handles.hpp"

namespace ferry::detail {

class CudaCopier {
 public:
  CudaCopier(int device, std::size_t chunk_bytes, unsigned slots);
  ~CudaCopier();
  CudaCopier(const CudaCopier&) = delete;
  CudaCopier& operator=(const CudaCopier&) = delete;

  // `device` memory is packed: rows of region.cols elements, back to back.
  // The caller has made the GPU current.
  void to_device(void* device, const HostRegion& host);
  void to_host(const HostRegion& host, const void* device);

  cudaStream_t h2d() const noexcept { return h2d_.get(); }
  cudaStream_t d2h() const noexcept { return d2h_.get(); }

 private:
  struct Slot {
    void* buffer = nullptr;  // cudaHostAlloc'd, chunk_bytes
    Event done;              // the copy engine is finished with it
    bool busy = false;
  };

  void direct(const HostRegion& host, void* device, bool to_device, cudaStream_t stream);
  void staged_to_device(void* device, const HostRegion& host);
  void staged_to_host(const HostRegion& host, const void* device);
  void ensure_staging();

  int device_;
  std::size_t chunk_bytes_;
  unsigned slot_count_;
  Stream h2d_;
  Stream d2h_;
  std::mutex staging_mutex_;  // one staged transfer at a time uses the ring
  std::vector<Slot> slots_;
};

// True for page-locked (registered or cudaHostAlloc'd) and managed memory:
// what a copy engine can read without a staging copy.
bool dma_capable(const void* host);

}  // namespace ferry::detail
