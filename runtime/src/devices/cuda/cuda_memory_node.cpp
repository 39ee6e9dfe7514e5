// A local GPU as a memory node (NodeLink): its copies are DevicePool
// blocks, shipped and fetched through the copier's streams, copied from
// another local GPU peer to peer where the pair allows, and the link
// measured once at start. Tasks are cuda_device.cpp's.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "data/coherence.hpp"
#include "devices/cuda/cuda_device.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

namespace ferry::detail {

std::pair<std::uint64_t, void*> CudaDevice::allocate_block(std::size_t bytes) {
  if (bytes > pool_->stats().bound_bytes)
    throw OutOfMemory(fmt::format("{}: {} is more than all the memory replicas may take here ({})", name(),
                                  format_bytes(bytes), pool_->describe()),
                      bytes);
  for (int attempt = 0;; ++attempt) {
    try {
      // Stream-ordered on the host-to-device stream, where the copy into it
      // follows; frees go there too, so freed memory is reused at once.
      void* ptr = pool_->allocate(bytes, default_alignment, StreamRef{copier_->h2d()});
      const std::uint64_t id = next_block_.fetch_add(1, std::memory_order_relaxed);
      try {
        std::lock_guard lock(blocks_mutex_);
        blocks_.emplace(id, Block{ptr, bytes});
      } catch (...) {
        pool_->deallocate(ptr, bytes, StreamRef{copier_->h2d()});
        throw;
      }
      return {id, ptr};
    } catch (const OutOfMemory&) {
      // The pool's reclaim hook skipped copies busy in other threads at
      // that moment; a second look may find them free.
      if (attempt == 2 || evict(bytes) == 0) throw;
    }
  }
}

void CudaDevice::adopt(const BufferState& view, const void* source) {
  const CurrentDevice current(options_.ordinal);
  const std::uint64_t id = acquire_on_node(view, AccessMode::write, *this);
  try {
    const HostRegion shape = host_region(view);
    // On a stream of Ferry's own, ordered after the legacy default stream
    // (where the producer made the data ready, see import_device_data), and
    // finished before the replica is published: the lanes and copy streams
    // are non-blocking and would not wait for a copy on the legacy stream.
    const cudaStream_t stream = copier_->h2d();
    Event produced;
    produced.record(cudaStreamLegacy);
    check_cuda(cudaStreamWaitEvent(stream, produced.get(), 0), "cudaStreamWaitEvent (adopt)");
    check_cuda(cudaMemcpyAsync(pointer(id), source, shape.bytes(), cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync (adopt)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (adopt)");
    written_on_node(view, *this, id, nullptr);
  } catch (...) {
    release_on_node(view, *this, id);
    throw;
  }
  release_on_node(view, *this, id);
}

void* CudaDevice::pointer(std::uint64_t id) const {
  std::lock_guard lock(blocks_mutex_);
  const auto it = blocks_.find(id);
  if (it == blocks_.end()) throw Error(fmt::format("{}: no copy {} on this GPU (already dropped)", name(), id));
  return it->second.ptr;
}

std::uint64_t CudaDevice::ship(const HostRegion& source) {
  const CurrentDevice current(options_.ordinal);
  const CopyStart start = copy_starts();
  const auto [id, ptr] = allocate_block(source.bytes());
  try {
    copier_->to_device(ptr, source);
  } catch (...) {
    drop(id);
    throw;
  }
  copied_in(bytes_in_, start, source.bytes());
  return id;
}

std::uint64_t CudaDevice::allocate(const HostRegion& shape) {
  const CurrentDevice current(options_.ordinal);
  const auto block = allocate_block(shape.bytes());
  // The allocation is ordered on the copy stream; a kernel on a compute
  // stream may use the memory only once it has happened.
  try {
    Event allocated;
    allocated.record(copier_->h2d());
    allocated.wait();
  } catch (...) {
    drop(block.first);
    throw;
  }
  return block.first;
}

void CudaDevice::fetch(std::uint64_t id, const HostRegion& dest) {
  const CurrentDevice current(options_.ordinal);
  const CopyStart start = copy_starts();
  copier_->to_host(dest, pointer(id));
  copied_out(bytes_out_, start, dest.bytes());
}

void CudaDevice::open_peer(CudaDevice& source) {
  std::lock_guard lock(peers_mutex_);
  if (peers_.contains(source.ordinal())) return;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, options_.ordinal, source.ordinal()) != cudaSuccess) {
    cudaGetLastError();
    can = 0;
  }
  bool direct = can != 0;
  if (direct) {
    // This GPU's context maps the source's memory (the caller made this GPU
    // current); the source's pool lets this GPU at its blocks.
    const cudaError_t enabled = cudaDeviceEnablePeerAccess(source.ordinal(), 0);
    if (enabled != cudaSuccess && enabled != cudaErrorPeerAccessAlreadyEnabled) {
      log().warn("{}: peer access to {} failed ({}); copies between them go through the driver", name(),
                 source.name(), cuda_text(enabled));
      direct = false;
    }
    cudaGetLastError();  // an "already enabled" is an answer, not an error for the next call
    if (direct) {
      try {
        source.pool_->grant_access(options_.ordinal);
      } catch (const std::exception& e) {
        log().warn("{}: {}'s memory pool cannot be opened to it ({}); copies go through the driver", name(),
                   source.name(), e.what());
        cudaGetLastError();
        direct = false;
      }
    }
  }
  peers_.emplace(source.ordinal(), direct);
  log().info("{}: copies from {} go {}", name(), source.name(),
             direct ? "peer to peer" : "through the copy engines by the driver (no peer access between them)");
}

std::optional<std::uint64_t> CudaDevice::copy_from(NodeLink& source, std::uint64_t source_id, const HostRegion& shape) {
  auto* peer = dynamic_cast<CudaDevice*>(&source);
  if (peer == nullptr || peer == this || !alive() || !peer->alive() || shape.bytes() == 0) return std::nullopt;
  const CurrentDevice current(options_.ordinal);
  const CopyStart start = copy_starts();
  try {
    open_peer(*peer);
    const void* from = peer->pointer(source_id);
    const auto [id, ptr] = allocate_block(shape.bytes());
    try {
      // On this GPU's copy stream, where its allocation is ordered; the
      // source copy is complete (coherence hands over only settled copies).
      const cudaStream_t stream = copier_->h2d();
      check_cuda(cudaMemcpyPeerAsync(ptr, options_.ordinal, from, peer->ordinal(), shape.bytes(), stream),
                 "cudaMemcpyPeerAsync");
      Event done;
      done.record(stream);
      done.wait();
    } catch (...) {
      drop(id);
      throw;
    }
    // What the link model learns of this pair: placement weighs it like any link.
    copied_in(bytes_peer_, start, shape.bytes(), peer->node());
    return id;
  } catch (const std::exception& e) {
    cudaGetLastError();
    log().warn("{}: a copy from {} failed ({}); it goes through the host instead", name(), peer->name(), e.what());
    return std::nullopt;
  }
}

void CudaDevice::drop(std::uint64_t id) noexcept {
  Block block;
  {
    std::lock_guard lock(blocks_mutex_);
    const auto it = blocks_.find(id);
    if (it == blocks_.end()) return;
    block = it->second;
    blocks_.erase(it);
  }
  try {
    const CurrentDevice current(options_.ordinal);
    pool_->deallocate(block.ptr, block.bytes, StreamRef{copier_->h2d()});
  } catch (const std::exception& e) {
    log().error("{}: freeing a replica of {} failed: {}", name(), format_bytes(block.bytes), e.what());
  }
}

void CudaDevice::measure_link() {
  // One chunk each way (the first pays for mapping): where a transfer of
  // real data would take it. Real transfers refine the figures.
  const std::size_t bytes = std::min<std::size_t>(options_.chunk_bytes, std::size_t{4} << 20);
  Link to{10e-6, 20e9}, from{10e-6, 20e9};
  void* host = nullptr;
  try {
    check_cuda(cudaHostAlloc(&host, bytes, cudaHostAllocPortable), "cudaHostAlloc (link probe)");
    const auto [id, ptr] = allocate_block(bytes);
    HostRegion region{host, DType::u8, 1, bytes, bytes};
    const auto time = [](const std::function<void()>& copy) { return fastest(3, copy); };
    HostRegion tiny{host, DType::u8, 1, 8, 8};
    const double latency = time([&] { copier_->to_device(ptr, tiny); });
    to = Link{latency, static_cast<double>(bytes) / std::max(time([&] { copier_->to_device(ptr, region); }) - latency, 1e-9)};
    from = Link{latency, static_cast<double>(bytes) / std::max(time([&] { copier_->to_host(region, ptr); }) - latency, 1e-9)};
    drop(id);
  } catch (const std::exception& e) {
    log().debug("{}: link probe failed ({}); assuming 20 GB/s until transfers tell", name(), e.what());
    cudaGetLastError();
  }
  if (host != nullptr) cudaFreeHost(host);
  set_link(to, from);
}

}  // namespace ferry::detail
