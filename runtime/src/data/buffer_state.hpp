// What a Buffer handle points at. A root owns the storage, the replicas and
// the access history used to infer dependencies; every view of it (split,
// tiles) is a BufferState with its own region of that root.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/allocator/memory_resource.hpp"
#include "ferry/runtime/dtype.hpp"
#include "ferry/runtime/region.hpp"

namespace ferry::detail {

class RuntimeCore;
struct LineageEntry;
struct TaskRecord;

// The last writer of a region and the readers since; each holds a task reference.
struct AccessRecord {
  Region region;
  TaskRecord* writer = nullptr;
  std::vector<TaskRecord*> readers;
};

// What the coherence layer keeps per copy on a remote node (coherence.hpp).
struct RemoteCopy;

struct BufferRoot {
  std::uint64_t runtime_id = 0;
  std::weak_ptr<RuntimeCore> runtime;
  std::shared_ptr<MemoryResource> memory;  // keeps the host replica valid past the runtime
  DType dtype = DType::f32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t bytes = 0;
  void* host = nullptr;
  // Unified (managed) storage: `host` is addressable on the host and every
  // local GPU, so local GPUs use it in place (prefetch and advice instead of
  // copies); copies exist only on remote nodes.
  bool unified = false;
  // The local GPU whose task last moved (part of) it there, or -1; host use
  // moves it back first. The GPU its advice names, or -2 before any.
  std::atomic<int> unified_device{-1};
  std::atomic<int> unified_advised{-2};

  std::mutex mutex;  // guards records
  std::vector<AccessRecord> records;

  // Copies of regions on other memory nodes (GPUs, remote hosts), guarded by
  // transfer_mutex, which is held across the transfers that change them
  // (recursive: recomputing lost data re-enters it).
  std::recursive_mutex transfer_mutex;
  std::vector<std::shared_ptr<RemoteCopy>> copies;
  // Regions a running task's input is being shipped from, without the lock
  // (acquire_on_node): pieces of one buffer go out back to back, each
  // transfer's start overlapping the last one's end. Whoever wants an
  // overlapping region waits for `shipped`; a prefetch leaves it alone.
  std::vector<Region> shipping;
  // Likewise regions a modified copy is being fetched home into, without
  // the lock (settle_copies_for_host): host users of an overlapping region
  // wait for them, whether they read or write.
  std::vector<Region> homing;
  std::condition_variable_any shipped;  // a ship or a fetch in flight is over
  // Modified copies (of other roots) whose lineage read a region of this
  // one, so that a replay never reads newer data than the lost task did.
  // When the version it read was the host's (`host_version`), the host's
  // bytes are kept for it: copied aside just before they change (data
  // versions); a remote overwrite leaves them as they are. Otherwise the
  // copy comes home before the region is overwritten.
  struct LineageReader {
    std::weak_ptr<BufferRoot> root;
    std::weak_ptr<RemoteCopy> copy;
    Region read;
    std::weak_ptr<LineageEntry> entry;
    std::size_t arg = 0;  // which of the entry's buffers read it
    bool host_version = false;
    // Otherwise, the task of a node's lineage whose output it read (null
    // when the copy it read had none): a replay of that task, or of one
    // before it, has not made that version yet (coherence.cpp, replay).
    std::weak_ptr<LineageEntry> version_writer;
  };
  std::vector<LineageReader> lineage_readers;
  std::atomic<bool> has_lineage_readers{false};  // lets host-only work skip the lock
  std::atomic<std::size_t> copy_count{0};  // lets host-only work skip the lock

  BufferRoot() = default;
  BufferRoot(const BufferRoot&) = delete;
  BufferRoot& operator=(const BufferRoot&) = delete;
  ~BufferRoot();
};

struct BufferState {
  std::shared_ptr<BufferRoot> root;
  Region region;
  std::uint64_t id = 0;
  std::string name;

  std::size_t ld() const noexcept { return root->cols; }
  std::size_t offset_bytes() const noexcept {
    return (region.row0 * root->cols + region.col0) * size_of(root->dtype);
  }
  // The view's first element in the host replica, every buffer's home.
  void* host_data() const noexcept { return static_cast<char*>(root->host) + offset_bytes(); }
  bool whole() const noexcept { return region.row0 == 0 && region.col0 == 0 && region.rows == root->rows && region.cols == root->cols; }
};

}  // namespace ferry::detail
