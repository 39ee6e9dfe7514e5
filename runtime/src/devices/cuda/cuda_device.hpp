// A local GPU as a device of the runtime and as a memory node
// the coherence layer keeps copies on (NodeLink): ship is a host-to-device
// copy into DevicePool memory, allocate a DevicePool block, fetch a
// device-to-host copy, drop a free. Shared and modified replicas, LRU
// eviction under memory pressure (a modified replica is written back
// first) and the rules for tiles are the coherence layer's, exactly as for
// a remote host.
//
// Threads, all blocking when idle:
//   - one executor: moves a ready task's inputs in (copy stream), enqueues
//     its kernel on one of `lanes()` compute streams and records an event
//     after it, then takes the next task; kernels run while it works. When
//     no task has come for `idle_trim_after` it trims the memory pool once;
//   - one completer per compute stream: waits for that stream's events in
//     order (blocking-sync events: it sleeps, it does not spin), then does
//     the bookkeeping and releases the task's successors;
//   - a successor placed on this GPU whose only unfinished predecessor is
//     the task just launched is released at that launch, not at its
//     completion, and runs on the same stream: the stream orders the two on
//     the GPU, so a chain of dependent tasks is enqueued back to back
//     instead of waiting a completer -> core -> executor round each;
//   - two prefetchers: ship the inputs of tasks assigned here while their
//     predecessors still run, two at a time, so the copy engine is fed
//     while one of them wakes from waiting for its copy.
// Unified buffers are not copied: the executor prefetches their pages to
// the GPU on the task's compute stream and the kernel gets the managed pointer.
//
// Held buffers, work accounting, prefetching, falling back to the CPU, the
// link's trace lanes and measurement are every offload device's
// (devices/offload_device.hpp).
//
// Only for translation units built with FERRY_WITH_CUDA.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "devices/cuda/cuda_copy.hpp"
#include "devices/cuda/cuda_handles.hpp"
#include "devices/offload_device.hpp"
#include "ferry/allocator/device_pool.hpp"

namespace ferry::detail {

class DeviceHost;

struct CudaDeviceOptions {
  int ordinal = 0;
  // Bytes of the GPU that replicas may take; 0: its free memory at start
  // less a safety margin (other processes and libraries share the GPU).
  std::size_t memory_limit = 0;
  unsigned streams = 2;  // compute streams: tasks that may run side by side
  std::size_t chunk_bytes = std::size_t{4} << 20;
  unsigned slots = 4;  // staging buffers for pageable host memory
  // After this long without a new task the memory pool's reserve (freed
  // blocks kept for reuse) goes back to the GPU, for other processes and
  // for other allocators in this one (PyTorch, CuPy in the same notebook).
  std::chrono::steady_clock::duration idle_trim_after = std::chrono::seconds(2);
};

class CudaDevice final : public OffloadDevice {
 public:
  CudaDevice(DeviceHost& runtime, DeviceId id, MemoryNodeId node, CudaDeviceOptions options);
  ~CudaDevice() override;

  bool can_run(const KernelDef& kernel) const override { return static_cast<bool>(kernel.cuda); }
  // The CUDA error that made it unusable (a sticky error); empty while alive.
  std::string down_reason() const override { return health().reason(); }
  unsigned lanes() const override { return static_cast<unsigned>(lanes_.size()); }
  void enqueue(TaskRecord* task) override;
  void prefetch(TaskRecord* task) override;

  // NodeLink
  std::uint64_t epoch() const noexcept override { return 1; }
  std::uint64_t ship(const HostRegion& source) override;
  std::uint64_t allocate(const HostRegion& shape) override;
  void fetch(std::uint64_t id, const HostRegion& dest) override;
  void drop(std::uint64_t id) noexcept override;
  // From another local GPU: one copy between the two, peer to peer where the
  // topology allows (peer access enabled, the source's pool opened to this
  // GPU), else by the copy engines through the driver; never through Ferry's
  // host replicas. Nothing when the source is not a local GPU.
  std::optional<std::uint64_t> copy_from(NodeLink& source, std::uint64_t source_id, const HostRegion& shape) override;

  int ordinal() const noexcept { return options_.ordinal; }
  // Makes `bytes()` bytes of device memory at `source` (on this GPU, e.g. a
  // CuPy or PyTorch array) the view's modified replica here, copied device to
  // device: the data never crosses the host until someone reads it there.
  // The copy waits for the work on the legacy default stream (where a DLPack
  // producer asked with stream=1 makes its data ready) and is finished
  // before the replica is published.
  void adopt(const BufferState& view, const void* source);
  std::size_t bytes_to_device() const noexcept { return bytes_in_.load(std::memory_order_relaxed); }
  std::size_t bytes_from_device() const noexcept { return bytes_out_.load(std::memory_order_relaxed); }
  std::size_t stream_ordered() const noexcept { return stream_ordered_.load(std::memory_order_relaxed); }
  std::size_t bytes_from_peers() const noexcept { return bytes_peer_.load(std::memory_order_relaxed); }
  // One line: model, memory bound and use, streams.
  std::string describe() const;

 private:
  struct Block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  // A task whose kernel is enqueued, waiting for its event.
  struct InFlight {
    TaskRecord* task = nullptr;
    std::vector<std::uint64_t> ids;  // per buffer: its copy here, 0 for unified roots
    std::unique_ptr<Event> start, end;
    std::int64_t launched_ns = 0;
  };
  struct Lane {
    std::size_t index = 0;
    Stream stream;
    int trace_lane = 0;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<InFlight> waiting;
    std::thread completer;
  };

  void executor_loop();
  void completer_loop(Lane& lane);
  void prefetch_loop();
  void launch(TaskRecord* task);
  // Timing events for a task's start and end, reused: a chain of short
  // tasks would otherwise create and destroy two per task.
  std::unique_ptr<Event> take_event();
  void return_events(InFlight& flight) noexcept;
  Lane& lane_for(TaskRecord* task);
  // After `task` was enqueued on `lane`: releases its successors that can
  // run behind it on that stream (see the comment at the top).
  void release_ordered(TaskRecord* task, const Lane& lane);
  // Before an ordered task leaves its stream (to the CPU, or failed): its
  // predecessor's outputs are settled first, or none of them is seen.
  static void wait_for_order(TaskRecord* task) noexcept;
  // Moves the task's buffers here; false when it cannot (the task has then
  // been handed to the CPU, or finished as failed).
  bool stage_buffers(TaskRecord* task, InFlight& flight, Lane& lane);
  void complete(InFlight& flight, Lane& lane, cudaError_t status);
  // A task that cannot run here: to the CPU, or failed with `failure()`
  // (offload_device.hpp), after its predecessor on a stream is settled.
  void hand_back(TaskRecord* task, const std::function<std::string()>& failure);
  // Finishes a task that never reached a stream.
  void finish_unlaunched(TaskRecord* task, const std::vector<std::uint64_t>& ids);
  void restore_host_args(TaskRecord* task);
  void unpin(TaskRecord* task, const std::vector<std::uint64_t>& ids);
  void settle_outputs(TaskRecord* task, const std::vector<std::uint64_t>& ids);
  // Unified buffers are not copied ahead: their pages move with the task.
  bool prefetchable(const BufferState& view) const override { return !view.root->unified; }
  bool room_for_prefetch(const BufferState& view) const override;
  void lost(const std::string& reason);
  // A CUDA error as people read it: its text and its name.
  static std::string cuda_text(cudaError_t status);
  // Trims the memory pool; the bytes that went back to the GPU.
  std::size_t give_back_reserve(const char* why) noexcept;

  std::pair<std::uint64_t, void*> allocate_block(std::size_t bytes);
  void* pointer(std::uint64_t id) const;
  // Once per source GPU: peer access from this GPU, if the pair has it.
  void open_peer(CudaDevice& source);
  void measure_link();

  CudaDeviceOptions options_;
  std::string model_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> bytes_in_{0}, bytes_out_{0};
  std::atomic<std::size_t> bytes_peer_{0};  // copied in from another local GPU
  std::atomic<std::size_t> stream_ordered_{0};

  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<CudaCopier> copier_;
  mutable std::mutex blocks_mutex_;
  std::unordered_map<std::uint64_t, Block> blocks_;
  std::atomic<std::uint64_t> next_block_{1};

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;     // the executor's
  std::condition_variable prefetch_cv_;  // the prefetchers'
  std::deque<TaskRecord*> ready_;
  std::deque<Prefetch> prefetches_;
  int prefetching_ = 0;  // prefetchers running a job (under queue_mutex_)

  std::mutex peers_mutex_;
  std::unordered_map<int, bool> peers_;  // source ordinal -> peer to peer

  std::mutex events_mutex_;
  std::vector<std::unique_ptr<Event>> spare_events_;

  std::vector<std::unique_ptr<Lane>> lanes_;
  unsigned next_lane_ = 0;  // executor only
  std::thread executor_;
  // Two, so that one input's copy is queued on the copy stream while the
  // other's thread wakes from waiting for its own: a ship waits for its
  // bytes to land, and a copy engine fed one piece at a time idles through
  // each wake-up (an H200, pinned memory: cudaMemcpy in 9 MiB pieces, each
  // waited for, moved 74 % of one whole cudaMemcpy; bench/README.md "GPU").
  static constexpr int prefetch_threads = 2;
  std::vector<std::thread> prefetchers_;
};

}  // namespace ferry::detail
