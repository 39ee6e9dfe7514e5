// Keeping buffers coherent across memory nodes. The host
// replica is the home of every buffer; another node (a local GPU, a remote
// host) holds copies of regions. A copy is shared (same as the host) or modified (the
// only valid data, host stale). Tasks order all of this: these functions run
// when a task is about to run, so no other task touches the same region.
//
// A modified copy remembers the tasks that wrote it since the host last had
// the data (its lineage). When its node is lost, those tasks are replayed on
// the host, in submission order, so the data is recomputed instead of lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/buffer_state.hpp"
#include "ferry/allocator/small_objects.hpp"
#include "ferry/runtime/access.hpp"
#include "ferry/runtime/kernel.hpp"
#include "ferry/runtime/place.hpp"
#include "base/buffer_args.hpp"
#include "base/scratch_bytes.hpp"

namespace ferry::detail {

// A region of a host replica in kernel terms.
struct HostRegion {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::size_t rows = 0, cols = 0, ld = 0;
  std::size_t bytes() const noexcept { return rows * cols * size_of(dtype); }
};
HostRegion host_region(const BufferState& view);
HostRegion host_region(BufferRoot& root, const Region& region);
// A region's rows, one after another (`bytes()` of them), and back: the form
// a tile of a larger matrix travels and is kept in.
void pack_rows(const HostRegion& from, std::byte* out);
void unpack_rows(const std::byte* in, const HostRegion& to);

// A node that holds copies: implemented by the local GPU and remote devices.
class NodeLink {
 public:
  virtual ~NodeLink() = default;
  virtual MemoryNodeId node() const noexcept = 0;
  virtual bool alive() const noexcept = 0;
  // Changes whenever the node's session is lost: copies of an older epoch are gone.
  virtual std::uint64_t epoch() const noexcept = 0;
  // Remembers a root that has copies here, so they can be brought home at shutdown.
  virtual void hold(const std::shared_ptr<BufferRoot>& root) = 0;
  // Blocking; throw RemoteError when the node fails.
  virtual std::uint64_t ship(const HostRegion& source) = 0;   // a new copy holding the region's data
  virtual std::uint64_t allocate(const HostRegion& shape) = 0;  // a new copy, contents undefined
  virtual void fetch(std::uint64_t id, const HostRegion& dest) = 0;
  virtual void drop(std::uint64_t id) noexcept = 0;  // fire and forget
  // A new copy here of copy `source_id` on `source`, moved between the two
  // nodes directly (host-to-host), not through this process; nothing when
  // this pair cannot, or the move failed (the caller moves it through the
  // host then). Blocking.
  virtual std::optional<std::uint64_t> copy_from(NodeLink& /*source*/, std::uint64_t /*source_id*/,
                                                 const HostRegion& /*shape*/) {
    return std::nullopt;
  }
};

// A task that wrote a copy; replayed on the host if the copy is lost.
struct LineageEntry {
  std::uint64_t task_id = 0;
  std::string name;
  std::shared_ptr<const KernelDef> kernel;
  KernelArgs args;  // buffer data null; filled at replay
  // Made by a remote's proxy, freed by whoever ends the lineage: from the
  // pool of small objects, as the entry itself.
  std::vector<std::uint32_t, SmallObjectAllocator<std::uint32_t>> buffer_args;
  // Parallel to buffer_args.
  std::vector<std::weak_ptr<BufferRoot>, SmallObjectAllocator<std::weak_ptr<BufferRoot>>> roots;
  std::vector<Region, SmallObjectAllocator<Region>> regions;
  std::atomic<bool> replayed{false};

  // The versions of what it only read (parallel to buffer_args), guarded by
  // versions_mutex. `host_version[i]`: the data it read was the host's (no
  // node held a newer copy) — decided when its copy was first noted.
  // `snapshots[i]`: those bytes, packed, copied aside when the host's were
  // about to change while this entry could still be replayed (or was being
  // replayed). A replay reads the snapshot, else a copy of the host's bytes
  // taken under the root's lock (unchanged since, or a snapshot would
  // exist); never a newer version.
  std::mutex versions_mutex;
  bool versions_noted = false;
  std::vector<char> host_version;
  // Where it was not: the task that wrote the node's version it read (the
  // last of that copy's lineage), decided with host_version.
  std::vector<std::weak_ptr<LineageEntry>> version_writers;
  std::vector<std::shared_ptr<const ScratchBytes>> snapshots;

  const BufferArg& buffer_arg(std::size_t i) const { return detail::buffer_arg(args, buffer_args, i); }
};

// A modified copy is brought home once it has been written this many times
// since its data was last there, so its lineage starts afresh: the memory
// lineage takes and the tasks replayed after its node is lost stay bounded
// on a chain of any length. At least 4096 tasks, and one per 16 KiB of the
// copy, so a large copy's fetch stays small beside the tasks it cuts.
std::size_t lineage_limit(std::size_t bytes) noexcept;

struct RemoteCopy {
  NodeLink* link = nullptr;
  std::uint64_t epoch = 0;
  Region region;
  std::uint64_t id = 0;
  std::size_t bytes = 0;
  bool modified = false;
  std::uint64_t last_use = 0;  // for LRU eviction
  int pins = 0;                // tasks running with it: not evictable
  std::vector<std::shared_ptr<LineageEntry>> lineage;
  // Tasks sent to write it since its data was last home (forwarded ones
  // included, before their replies add to the lineage): see lineage_limit.
  std::size_t writes_since_home = 0;
  // Written lineage_limit times: its data comes home before the next write.
  // Writes sent count before any of them has landed (`modified` is set by
  // the first reply): a chain forwarded faster than its replies came back
  // used to pass the limit with the copy still unmodified, and went on
  // thousands of writes past it without a checkpoint.
  bool checkpoint_due() const noexcept { return writes_since_home >= lineage_limit(bytes); }
};


// Where the view's current data is, for placement: the nodes holding a copy
// of exactly its region, the host unless a modified copy overlaps it, and,
// for a unified root the host holds, every node in `in_place` (local GPUs,
// which read it where it is).
std::vector<MemoryNodeId> valid_nodes(const BufferState& view, const std::vector<MemoryNodeId>& in_place);

// Before a task runs on `link`'s node: the view's data there, as a copy id,
// pinned until release_on_node.
std::uint64_t acquire_on_node(const BufferState& view, AccessMode mode, NodeLink& link);
void release_on_node(const BufferState& view, NodeLink& link, std::uint64_t id);
// Frees at least `bytes` on the node by dropping its least recently used
// unpinned copies (bringing modified ones home first); returns what it freed.
// Roots busy in another thread are skipped rather than waited for.
std::size_t evict_from_node(NodeLink& link, const std::vector<std::shared_ptr<BufferRoot>>& roots, std::size_t bytes);
// Before a task that writes the view runs on `link`'s node, every earlier
// writer of it finished (the task is ready, and later writers wait for it):
// when the copy there is due (lineage_limit), brings its data home, which
// cuts its lineage. True when it did. A task sent before its predecessors
// finish (a forwarded chain) cannot: it is not sent while the copy is due.
bool checkpoint_on_node(const BufferState& view, NodeLink& link);
// Whether checkpoint_on_node would bring the view's copy on `link` home.
bool checkpoint_due(const BufferState& view, NodeLink& link);
// After it succeeded: what it wrote is now valid only there.
void written_on_node(const BufferState& view, NodeLink& link, std::uint64_t id, std::shared_ptr<LineageEntry> lineage);
// Before host use (a CPU task, host()): modified copies overlapping the view
// come back (or are recomputed if their node is gone); a write drops copies.
void acquire_on_host(const BufferState& view, AccessMode mode);
// Before a task is ready: ships the view to the node if nothing unfinished
// will still write it (`writer_pending` says); skipped otherwise.
void prefetch_on_node(const BufferState& view, NodeLink& link, const std::function<bool()>& writer_pending);
// Forgets every copy on the node (after bringing home what only it held).
void forget_node(BufferRoot& root, NodeLink& link);

// After a task that was to write the copy failed: its contents are not to
// be trusted, so the node drops it (the host keeps what it had).
void discard_on_node(const BufferState& view, NodeLink& link, std::uint64_t id);
// Before a local GPU uses a unified root in place: copies on other nodes
// are settled as for host use (modified ones come home; a write drops them),
// without moving the root's pages, which the GPU prefetches itself.
void acquire_unified(const BufferState& view, AccessMode mode);
// A root going away: lineage that read it keeps what it read (the host's
// bytes copied aside; a copy made from a newer version elsewhere brought
// home), as before an overwrite. Then drop_copies.
void keep_lineage_inputs(BufferRoot& root) noexcept;
// A root going away: every copy of it on a live node is dropped there.
void drop_copies(BufferRoot& root) noexcept;

}  // namespace ferry::detail
