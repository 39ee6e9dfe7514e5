#include "devices/cuda/cuda_copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// A region as rows of `row` bytes, `stride` bytes apart on the host; a
// contiguous one as one long row, so it moves in as few pieces as possible.
struct Layout {
  std::size_t row = 0;
  std::size_t stride = 0;
  std::size_t rows = 0;
  std::size_t bytes() const noexcept { return row * rows; }
};

Layout layout_of(const HostRegion& r) {
  const std::size_t element = size_of(r.dtype);
  if (r.rows <= 1 || r.ld == r.cols) return {r.bytes(), r.bytes(), r.bytes() == 0 ? 0u : 1u};
  return {r.cols * element, r.ld * element, r.rows};
}

// Bytes [offset, offset + len) of the packed stream, copied between the
// strided host rows and a packed buffer.
void pack(const HostRegion& r, const Layout& l, std::size_t offset, std::size_t len, std::byte* out) {
  std::size_t row = offset / l.row, in = offset % l.row;
  const auto* base = static_cast<const std::byte*>(r.data);
  while (len > 0) {
    const std::size_t n = std::min(len, l.row - in);
    std::memcpy(out, base + row * l.stride + in, n);
    out += n;
    len -= n;
    ++row;
    in = 0;
  }
}

void unpack(const HostRegion& r, const Layout& l, std::size_t offset, std::size_t len, const std::byte* in_buffer) {
  std::size_t row = offset / l.row, in = offset % l.row;
  auto* base = static_cast<std::byte*>(r.data);
  while (len > 0) {
    const std::size_t n = std::min(len, l.row - in);
    std::memcpy(base + row * l.stride + in, in_buffer, n);
    in_buffer += n;
    len -= n;
    ++row;
    in = 0;
  }
}

}  // namespace

bool dma_capable(const void* host) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is an answer here, not an error for the next call to trip on
    return false;
  }
  return attributes.type == cudaMemoryTypeHost || attributes.type == cudaMemoryTypeManaged;
}

CudaCopier::CudaCopier(int device, std::size_t chunk_bytes, unsigned slots)
    : device_(device), chunk_bytes_(chunk_bytes), slot_count_(std::max(2u, slots)) {
  if (chunk_bytes_ == 0) throw UsageError("the chunk size for GPU copies must be positive");
}

CudaCopier::~CudaCopier() {
  for (Slot& slot : slots_) {
    if (slot.busy) cudaEventSynchronize(slot.done.get());
    if (slot.buffer != nullptr) {
      const cudaError_t status = cudaFreeHost(slot.buffer);
      if (status != cudaSuccess && status != cudaErrorCudartUnloading)
        log().warn("cuda:{}: cudaFreeHost of a staging buffer failed: {}", device_, cudaGetErrorString(status));
    }
  }
}

void CudaCopier::to_device(void* device, const HostRegion& host) {
  if (host.bytes() == 0) return;
  if (dma_capable(host.data)) return direct(host, device, true, h2d_.get());
  staged_to_device(device, host);
}

void CudaCopier::to_host(const HostRegion& host, const void* device) {
  if (host.bytes() == 0) return;
  if (dma_capable(host.data)) return direct(host, const_cast<void*>(device), false, d2h_.get());
  staged_to_host(host, device);
}

void CudaCopier::direct(const HostRegion& host, void* device, bool to_device, cudaStream_t stream) {
  const Layout l = layout_of(host);
  auto* dev = static_cast<std::byte*>(device);
  auto* base = static_cast<std::byte*>(host.data);
  // Inferred from the addresses (unified addressing): right for pinned and managed host memory alike.
  const cudaMemcpyKind kind = cudaMemcpyDefault;
  // A copy that fails half-way leaves none of its pieces in flight: the
  // caller frees or reuses the memory at once.
  struct Settle {
    cudaStream_t stream;
    bool armed = true;
    ~Settle() {
      if (armed) cudaStreamSynchronize(stream);
    }
  } settle{stream};
  if (l.rows == 1) {
    // Chunks on one stream cost nothing in bandwidth, and let another
    // transfer queued meanwhile (a prefetch, an eviction) interleave.
    for (std::size_t offset = 0; offset < l.row; offset += chunk_bytes_) {
      const std::size_t len = std::min(chunk_bytes_, l.row - offset);
      check_cuda(to_device ? cudaMemcpyAsync(dev + offset, base + offset, len, kind, stream)
                           : cudaMemcpyAsync(base + offset, dev + offset, len, kind, stream),
                 "cudaMemcpyAsync");
    }
  } else {
    const std::size_t rows_per_chunk = std::max<std::size_t>(1, chunk_bytes_ / l.row);
    for (std::size_t r0 = 0; r0 < l.rows; r0 += rows_per_chunk) {
      const std::size_t n = std::min(rows_per_chunk, l.rows - r0);
      check_cuda(to_device ? cudaMemcpy2DAsync(dev + r0 * l.row, l.row, base + r0 * l.stride, l.stride, l.row, n, kind,
                                               stream)
                           : cudaMemcpy2DAsync(base + r0 * l.stride, l.stride, dev + r0 * l.row, l.row, l.row, n, kind,
                                               stream),
                 "cudaMemcpy2DAsync");
    }
  }
  Event done;
  done.record(stream);
  done.wait();
  settle.armed = false;
}

void CudaCopier::ensure_staging() {
  if (!slots_.empty()) return;
  std::vector<Slot> slots(slot_count_);
  for (Slot& slot : slots) {
    // Portable: any context of the process may DMA from it.
    const cudaError_t status = cudaHostAlloc(&slot.buffer, chunk_bytes_, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      cudaGetLastError();
      for (Slot& s : slots)
        if (s.buffer != nullptr) cudaFreeHost(s.buffer);
      if (status == cudaErrorMemoryAllocation)
        throw OutOfMemory(fmt::format("cuda:{}: no page-locked memory for {} staging buffers of {} bytes", device_,
                                      slot_count_, chunk_bytes_),
                          chunk_bytes_ * slot_count_);
      check_cuda(status, "cudaHostAlloc (staging)");
    }
  }
  slots_ = std::move(slots);
}

namespace {

template <typename Slots>
struct SettleRingT {
  Slots& slots;
  ~SettleRingT() {
    for (auto& s : slots)
      if (s.busy) {
        cudaEventSynchronize(s.done.get());
        s.busy = false;
      }
  }
};

}  // namespace

void CudaCopier::staged_to_device(void* device, const HostRegion& host) {
  std::lock_guard lock(staging_mutex_);
  ensure_staging();
  // However the transfer ends, the copy engine is done with the ring before it is used again.
  const SettleRingT<std::vector<Slot>> settle{slots_};
  const Layout l = layout_of(host);
  auto* dev = static_cast<std::byte*>(device);
  std::size_t k = 0;
  for (std::size_t offset = 0; offset < l.bytes(); offset += chunk_bytes_, ++k) {
    Slot& slot = slots_[k % slots_.size()];
    if (slot.busy) {
      slot.done.wait();
      slot.busy = false;
    }
    const std::size_t len = std::min(chunk_bytes_, l.bytes() - offset);
    pack(host, l, offset, len, static_cast<std::byte*>(slot.buffer));
    check_cuda(cudaMemcpyAsync(dev + offset, slot.buffer, len, cudaMemcpyHostToDevice, h2d_.get()), "cudaMemcpyAsync");
    slot.done.record(h2d_.get());
    slot.busy = true;
  }
  for (Slot& slot : slots_)
    if (slot.busy) {
      slot.done.wait();
      slot.busy = false;
    }
}

void CudaCopier::staged_to_host(const HostRegion& host, const void* device) {
  std::lock_guard lock(staging_mutex_);
  ensure_staging();
  // However the transfer ends, the copy engine is done with the ring before it is used again.
  const SettleRingT<std::vector<Slot>> settle{slots_};
  const Layout l = layout_of(host);
  const auto* dev = static_cast<const std::byte*>(device);
  const std::size_t chunks = (l.bytes() + chunk_bytes_ - 1) / chunk_bytes_;
  const auto issue = [&](std::size_t k) {
    Slot& slot = slots_[k % slots_.size()];
    const std::size_t offset = k * chunk_bytes_;
    const std::size_t len = std::min(chunk_bytes_, l.bytes() - offset);
    check_cuda(cudaMemcpyAsync(slot.buffer, dev + offset, len, cudaMemcpyDeviceToHost, d2h_.get()), "cudaMemcpyAsync");
    slot.done.record(d2h_.get());
    slot.busy = true;
  };
  // The copy engine runs up to a ring ahead of the host's unpacking.
  for (std::size_t k = 0; k < std::min<std::size_t>(chunks, slots_.size()); ++k) issue(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    Slot& slot = slots_[k % slots_.size()];
    slot.done.wait();
    slot.busy = false;
    const std::size_t offset = k * chunk_bytes_;
    unpack(host, l, offset, std::min(chunk_bytes_, l.bytes() - offset), static_cast<const std::byte*>(slot.buffer));
    if (k + slots_.size() < chunks) issue(k + slots_.size());
  }
}

}  // namespace ferry::detail
