#include "base/transfer_label.hpp"
#include "data/coherence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <cstring>
#include <mutex>

#include "base/task_label.hpp"
#include "data/cuda_unified.hpp"
#include "data/data_host.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// Replays are rare (a host was lost) and may touch many buffers: one at a time.
std::recursive_mutex& replay_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

std::atomic<std::uint64_t> use_clock{1};

// Copies and ships in flight: what host work must look at before it goes ahead.
void count_copies(BufferRoot& root) {
  root.copy_count.store(root.copies.size() + root.shipping.size(), std::memory_order_release);
}

// Set while this thread replays a lineage (replay): it may hold a root's
// lock from further up, so it must not wait for a transfer in flight (that
// one needs the lock to finish) nor release the lock for one of its own.
thread_local int replaying = 0;

// A thread-local's value for the length of a scope (replays nest).
template <typename T>
class Scoped {
 public:
  Scoped(T& slot, T now) : slot_(slot), outer_(slot) { slot_ = now; }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
  ~Scoped() { slot_ = outer_; }

 private:
  T& slot_;
  T outer_;
};

// The lineage a replay on this thread recomputes (bring_home), and the
// entry of it acquiring what it writes (replay): the versions that entry
// and the ones after it make do not exist yet.
thread_local const std::vector<std::shared_ptr<LineageEntry>>* recomputing = nullptr;
thread_local const LineageEntry* rewriting = nullptr;

// The root whose end this thread is keeping what its lineage readers read
// (keep_lineage_inputs): their weak references to it are expired already,
// yet a reader whose copy could not be fetched (its host lost meanwhile)
// is recomputed from it, its bytes still there until the end is over.
// Its (expired) weak references name it by their control block.
struct Ending {
  BufferRoot* root = nullptr;
  std::weak_ptr<BufferRoot> named;
};
thread_local Ending ending;

// `entry`'s buffer `arg` (an input, or its own lineage's output), when it
// is the root that is ending; null otherwise.
std::shared_ptr<BufferRoot> ending_root(const LineageEntry& entry, std::size_t arg) {
  const std::weak_ptr<BufferRoot>& root = entry.roots[arg];
  if (ending.root == nullptr || root.owner_before(ending.named) || ending.named.owner_before(root)) return nullptr;
  return std::shared_ptr<BufferRoot>(std::shared_ptr<BufferRoot>{}, ending.root);  // not owning: it is being destroyed
}

// Whether a replay on this thread may bring home the copy of a lineage
// reader of data it is about to overwrite: only when the reader read the
// version there now. One that read what the entry being replayed writes,
// or what an entry after it in the same lineage writes, must wait: replayed
// now, it would read a version that is not there yet (an axpy recomputed
// from the stale input of the map being recomputed before it). It is
// brought home later, by its own loss or by the next write of the data.
bool version_made(const BufferRoot::LineageReader& reader) {
  if (replaying == 0 || rewriting == nullptr) return true;
  const auto writer = reader.version_writer.lock();
  if (!writer) return true;  // its copy came home since: the host's bytes hold it, or a later write settled it
  if (writer.get() == rewriting) return false;
  if (recomputing == nullptr) return true;
  const auto now = std::find_if(recomputing->begin(), recomputing->end(),
                                [](const auto& e) { return e.get() == rewriting; });
  return std::find(now, recomputing->end(), writer) == recomputing->end();
}

// Its node went away (or reconnected since): the copy no longer exists there.
bool lost(const RemoteCopy& copy) noexcept { return !copy.link->alive() || copy.epoch != copy.link->epoch(); }

void remove_copy(BufferRoot& root, const std::shared_ptr<RemoteCopy>& copy, bool drop) {
  if (drop && !lost(*copy)) copy->link->drop(copy->id);
  std::erase(root.copies, copy);
  count_copies(root);
}

}  // namespace

void pack_rows(const HostRegion& from, std::byte* out) {
  const std::size_t row = from.cols * size_of(from.dtype), stride = from.ld * size_of(from.dtype);
  for (std::size_t i = 0; i < from.rows; ++i)
    std::memcpy(out + i * row, static_cast<const std::byte*>(from.data) + i * stride, row);
}

void unpack_rows(const std::byte* in, const HostRegion& to) {
  const std::size_t row = to.cols * size_of(to.dtype), stride = to.ld * size_of(to.dtype);
  for (std::size_t i = 0; i < to.rows; ++i) std::memcpy(static_cast<std::byte*>(to.data) + i * stride, in + i * row, row);
}

namespace {

// The host's bytes of a region, packed; the root's lock is held.
std::shared_ptr<const ScratchBytes> packed_copy(BufferRoot& root, const Region& region) {
  const HostRegion from = host_region(root, region);
  auto bytes = std::make_shared<ScratchBytes>(from.bytes());
  pack_rows(from, bytes->data());
  return bytes;
}

void replay(LineageEntry& entry) {
  std::lock_guard lock(replay_mutex());
  ++replaying;
  struct Replaying {
    ~Replaying() { --replaying; }
  } replaying_until_return;
  // Claimed before it runs: the same task reached again through another of
  // its outputs while its inputs are being gathered must not run twice.
  if (entry.replayed.exchange(true, std::memory_order_acq_rel)) return;
  // Unclaimed if it does not run: a later try runs it then, rather than
  // taking it as done.
  struct Claim {
    LineageEntry& entry;
    bool ran = false;
    ~Claim() {
      if (!ran) entry.replayed.store(false, std::memory_order_release);
    }
  } claim{entry};
  // Inputs may themselves have been lost: acquiring them replays their lineage first.
  KernelArgs args = entry.args;
  std::vector<std::shared_ptr<BufferRoot>> held;
  std::vector<std::shared_ptr<const ScratchBytes>> versions;  // kept until the kernel ran
  for (std::size_t i = 0; i < entry.buffer_args.size(); ++i) {
    auto root = entry.roots[i].lock();
    if (!root) root = ending_root(entry, i);
    BufferArg& arg = buffer_arg(args, entry.buffer_args, i);
    if (!root && writes(arg.mode) && !reads(arg.mode)) {
      // An output that is gone: nobody can read the result, but the kernel
      // still writes it somewhere.
      auto scratch = std::make_shared<ScratchBytes>(arg.bytes());
      arg.data = scratch->data();
      arg.ld = arg.cols;
      versions.push_back(std::move(scratch));
      continue;
    }
    BufferState view;
    view.root = root;
    view.region = entry.regions[i];
    if (!writes(arg.mode)) {
      // The version it read, not the input as it is now: copied aside, or
      // the host's bytes, unchanged since (or they would have been copied
      // aside first, under the root's lock, which this copy takes too: the
      // bytes may change as soon as it is released).
      std::shared_ptr<const ScratchBytes> snapshot;
      bool host_version = false;
      const auto taken = [&] {
        std::lock_guard lock(entry.versions_mutex);
        if (i < entry.snapshots.size()) snapshot = entry.snapshots[i];
        host_version = i < entry.host_version.size() && entry.host_version[i] != 0;
      };
      taken();
      if (!snapshot && host_version && root) {
        std::unique_lock lock(root->transfer_mutex);
        taken();
        if (!snapshot) snapshot = packed_copy(*root, entry.regions[i]);
      }
      if (snapshot) {
        arg.data = const_cast<std::byte*>(snapshot->data());  // read-only to the kernel
        arg.ld = arg.cols;
        versions.push_back(std::move(snapshot));
        if (root) held.push_back(std::move(root));
        continue;
      }
    }
    if (!root) {
      // An input freed while what was computed from it stayed only on the
      // lost node, and keep_lineage_inputs could not keep what it read: the
      // kernel must not run on a null buffer.
      throw RemoteError(fmt::format("{} wrote data held only by a lost node, and its input {} was freed: it "
                                    "cannot be recomputed",
                                    task_label(entry.name, entry.kernel->name), i));
    }
    {
      const Scoped rewriting_while(rewriting, writes(arg.mode) ? &entry : rewriting);
      acquire_on_host(view, reads(arg.mode) ? AccessMode::read : AccessMode::write);
    }
    arg.data = host_region(*root, entry.regions[i]).data;
    held.push_back(std::move(root));
  }
  // A GPU-only kernel (CUDA source, or a plugin without a CPU variant) cannot
  // be replayed here: the data is lost, and the error says which task made it.
  if (!entry.kernel->cpu)
    throw RemoteError(
        fmt::format("{} wrote data held only by a lost node, and its kernel has no CPU variant to "
                    "recompute it on the host",
                    task_label(entry.name, entry.kernel->name)));
  log().debug("recomputing {} on the host", task_label(entry.name, entry.kernel->name));
  data_host().run_on_host(*entry.kernel, args, entry.name,
                          held.empty() ? std::weak_ptr<RuntimeCore>{} : held.front()->runtime);
  claim.ran = true;
}

// Whether replaying the copy's lineage would read the host's data of its
// region (a readwrite task in it), rather than write it whole.
bool lineage_reads(const BufferRoot& root, const RemoteCopy& copy) {
  for (const auto& entry : copy.lineage)
    for (std::size_t i = 0; i < entry->buffer_args.size(); ++i) {
      if (!reads(entry->buffer_arg(i).mode)) continue;
      const auto other = entry->roots[i].lock();
      if (other.get() == &root && entry->regions[i].overlaps(copy.region)) return true;
    }
  return false;
}

// A reader that needs nothing any more: its task, its output's buffer or
// its copy is gone, or the copy came home, unless it came home by
// replaying the task, which may be reading the input right now. `entry`
// is the reader's entry, locked (null: gone).
bool reader_done(const BufferRoot::LineageReader& r, const LineageEntry* entry) {
  if (entry == nullptr || r.root.expired()) return true;
  const auto copy = r.copy.lock();
  return (!copy || !copy->modified) && !entry->replayed.load(std::memory_order_acquire);
}

bool reader_done(const BufferRoot::LineageReader& r) { return reader_done(r, r.entry.lock().get()); }

// The host's bytes of `region` of `root` are about to change: lineage that
// read them as they are (host-version readers whose copy is still only
// elsewhere) gets them copied aside, packed, and stops depending on them.
// The root's lock is held.
void preserve_host_bytes(BufferRoot& root, const Region& region) {
  if (!root.has_lineage_readers.load(std::memory_order_acquire)) return;
  std::erase_if(root.lineage_readers, [&](const BufferRoot::LineageReader& r) {
    const auto entry = r.entry.lock();
    if (reader_done(r, entry.get())) return true;
    if (!r.host_version || !r.read.overlaps(region)) return false;
    std::lock_guard lock(entry->versions_mutex);
    if (entry->snapshots.size() <= r.arg) entry->snapshots.resize(r.arg + 1);
    if (!entry->snapshots[r.arg]) entry->snapshots[r.arg] = packed_copy(root, r.read);
    return true;
  });
  root.has_lineage_readers.store(!root.lineage_readers.empty(), std::memory_order_release);
}

// Bytes from a memory resource for the length of a scope.
struct Staging {
  Staging(std::shared_ptr<MemoryResource> from, std::size_t n)
      : memory(std::move(from)), bytes(n), data(static_cast<std::byte*>(memory->allocate(n))) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() { memory->deallocate(data, bytes); }
  std::shared_ptr<MemoryResource> memory;
  std::size_t bytes;
  std::byte* data;
};

// Makes the host hold the copy's data: fetched from a live node, or
// recomputed from lineage when its node is gone.
// Copies that hold the same data as `copy`: modified copies of exactly its
// region on other nodes, made from it host-to-host (copy_from). Modified
// copies of overlapping regions exist only that way: a write drops every
// other copy it overlaps, and a copy is made elsewhere only after modified
// data came home, or from a twin.
bool twins(const RemoteCopy& a, const RemoteCopy& b) noexcept {
  return &a != &b && a.modified && b.modified && a.region == b.region;
}

// The copy holds what the host holds: nothing to recompute it from.
void same_as_host(RemoteCopy& copy) {
  copy.modified = false;
  copy.lineage.clear();
  copy.writes_since_home = 0;
}

// The host holds the copy's data now: its twins are plain shared copies too.
void home_now(BufferRoot& root, RemoteCopy& copy) {
  for (auto& other : root.copies)
    if (twins(*other, copy)) same_as_host(*other);
  same_as_host(copy);
}

void bring_home(BufferRoot& root, RemoteCopy& copy) {
  const HostRegion dest = host_region(root, copy.region);
  preserve_host_bytes(root, copy.region);
  // From the copy's node, or when that is gone, from a twin on a live one.
  std::vector<RemoteCopy*> sources{&copy};
  for (auto& other : root.copies)
    if (twins(*other, copy)) sources.push_back(other.get());
  for (RemoteCopy* source : sources) {
    if (lost(*source)) continue;
    try {
      if (lineage_reads(root, copy)) {
        // Replaying the lineage starts from the host's data as it was: a
        // fetch that fails half-way must not have overwritten it (a task
        // would then apply twice). So the bytes land beside it first, in
        // memory of the buffer's own pool: reused and already mapped (a
        // fresh zero-filled vector cost a memset and a page fault per page,
        // a fifth of a 64 MiB fetch), and registered with the transport
        // where the pool's slabs are.
        const Staging staging(root.memory, dest.bytes());
        HostRegion packed = dest;
        packed.data = staging.data;
        packed.ld = dest.cols;
        source->link->fetch(source->id, packed);
        unpack_rows(staging.data, dest);
      } else {
        source->link->fetch(source->id, dest);
      }
      home_now(root, copy);
      return;
    } catch (const RemoteError& e) {
      log().warn("fetching a buffer back failed ({}); {}", e.what(),
                 source == sources.back() ? "recomputing it" : "trying another copy");
    }
  }
  if (copy.lineage.empty())
    throw RemoteError(fmt::format("a {} x {} region held only by a lost node (a remote host, or a GPU that failed) has "
                                  "no lineage to recompute it from",
                                  copy.region.rows, copy.region.cols));
  // The host holds the data as it was before the lineage: mark the copy home
  // first, so the replayed tasks read this region from the host.
  const auto lineage = std::move(copy.lineage);
  home_now(root, copy);
  log().warn("recomputing a {} x {} region on the host from its lineage ({} tasks, from '{}'): its only copy was on "
             "a lost remote",
             copy.region.rows, copy.region.cols, lineage.size(), lineage.front()->name);
  const Scoped recomputing_while(recomputing, &lineage);
  try {
    for (const auto& entry : lineage) replay(*entry);
  } catch (...) {
    // Not recomputed: the data is still only on the lost node, never the
    // host's old bytes passed off as it (whoever needs it next is told).
    copy.modified = true;
    copy.lineage = lineage;
    throw;
  }
}

}  // namespace

HostRegion host_region(BufferRoot& root, const Region& region) {
  HostRegion r;
  r.dtype = root.dtype;
  r.rows = region.rows;
  r.cols = region.cols;
  r.ld = root.cols;
  r.data = static_cast<char*>(root.host) + (region.row0 * root.cols + region.col0) * size_of(root.dtype);
  return r;
}

HostRegion host_region(const BufferState& view) { return host_region(*view.root, view.region); }

namespace {

using RootLock = std::unique_lock<std::recursive_mutex>;

bool overlaps_any(const std::vector<Region>& regions, const Region& region) {
  return std::any_of(regions.begin(), regions.end(), [&](const Region& r) { return r.overlaps(region); });
}
bool shipping_overlaps(const BufferRoot& root, const Region& region) { return overlaps_any(root.shipping, region); }
bool in_flight_overlaps(const BufferRoot& root, const Region& region) {
  return overlaps_any(root.shipping, region) || overlaps_any(root.homing, region);
}

// Locks the root; when data it needs sits only on a lost node, takes the
// replay lock first, so every replay takes locks in one order.

RootLock lock_for(BufferRoot& root, const Region& region, std::unique_lock<std::recursive_mutex>& replay_guard) {
  RootLock lock(root.transfer_mutex);
  const bool needs_replay = std::any_of(root.copies.begin(), root.copies.end(), [&](const auto& c) {
    return c->modified && lost(*c) && c->region.overlaps(region);
  });
  if (needs_replay && !replay_guard.owns_lock()) {
    lock.unlock();
    replay_guard.lock();
    lock.lock();
  }
  return lock;
}

// Ships `view`'s region from the host without holding the root's lock,
// which is held on entry and on return: pieces of one buffer then go out
// back to back (each transfer's start overlapping the last one's end)
// rather than one lock hold at a time. Listed in `shipping` meanwhile:
// whoever would change the region or its copies waits for `shipped`.
std::uint64_t ship_unlocked(BufferRoot& root, RootLock& lock, const BufferState& view, NodeLink& link) {
  root.shipping.push_back(view.region);
  count_copies(root);
  const HostRegion source = host_region(view);
  lock.unlock();
  std::optional<std::uint64_t> id;
  std::exception_ptr failure;
  try {
    id = link.ship(source);
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  root.shipping.erase(std::find(root.shipping.begin(), root.shipping.end(), view.region));
  count_copies(root);
  root.shipped.notify_all();
  if (failure) std::rethrow_exception(failure);
  return *id;
}

// Brings home the modified copies whose lineage read `region` of `root`
// in a version that was not the host's, before it is overwritten (those
// that read the host's keep it: preserve_host_bytes). Runs without
// `root`'s lock (it locks theirs).
void settle_lineage_readers(BufferRoot& root, const Region& region) {
  std::vector<BufferRoot::LineageReader> readers;
  {
    RootLock lock(root.transfer_mutex);
    if (root.lineage_readers.empty()) return;
    std::erase_if(root.lineage_readers, [](const auto& r) {
      auto copy = r.copy.lock();
      return !copy || !copy->modified || r.root.expired();
    });
    for (const auto& r : root.lineage_readers)
      if (r.read.overlaps(region) && !r.host_version && version_made(r)) readers.push_back(r);
  }
  if (readers.empty()) return;
  std::lock_guard replay_guard(replay_mutex());
  for (const auto& r : readers) {
    auto other = r.root.lock();
    auto copy = r.copy.lock();
    if (!other || !copy) continue;
    RootLock lock(other->transfer_mutex);
    if (copy->modified) bring_home(*other, *copy);
  }
}

// Its read-only inputs must not change under a lineage entry until the
// copy it wrote is home: they remember the copy. Locks each input on its
// own; never call it holding the copy's root's lock.
void note_lineage_reads(const std::shared_ptr<BufferRoot>& root, const std::shared_ptr<RemoteCopy>& copy,
                        const std::shared_ptr<LineageEntry>& lineage) {
  bool first = false;
  {
    std::lock_guard lock(lineage->versions_mutex);
    first = !lineage->versions_noted;
    lineage->versions_noted = true;
    // Only a task with a read-only input has versions to note: a chain of
    // readwrite tasks allocates nothing here.
    bool has_read_only = false;
    for (std::size_t i = 0; i < lineage->buffer_args.size() && first && !has_read_only; ++i)
      has_read_only = !writes(lineage->buffer_arg(i).mode);
    if (has_read_only) {
      lineage->host_version.assign(lineage->buffer_args.size(), 0);
      lineage->version_writers.assign(lineage->buffer_args.size(), {});
    }
  }
  for (std::size_t i = 0; i < lineage->buffer_args.size(); ++i) {
    if (writes(lineage->buffer_arg(i).mode)) continue;
    auto input = lineage->roots[i].lock();
    if (!input || input == root) continue;
    RootLock input_lock(input->transfer_mutex);
    bool host_version = false;
    std::weak_ptr<LineageEntry> version_writer;
    {
      // Decided once, when the task's first output is noted: nothing wrote
      // the input between its run and this (writers wait for it).
      std::lock_guard lock(lineage->versions_mutex);
      if (first) {
        const auto newer = std::find_if(input->copies.begin(), input->copies.end(), [&](const auto& c) {
          return c->modified && c->region.overlaps(lineage->regions[i]);
        });
        lineage->host_version[i] = newer == input->copies.end() ? 1 : 0;
        if (newer != input->copies.end() && !(*newer)->lineage.empty())
          lineage->version_writers[i] = (*newer)->lineage.back();
      }
      host_version = lineage->host_version[i] != 0;
      version_writer = lineage->version_writers[i];
    }
    // An input only read (a chain's `read(x)`) is written never, so nothing
    // else clears its list: readers whose copies went stale are dropped
    // before it would grow, or every move of the chain's copy to another
    // host adds its whole lineage again (tens of thousands, megabytes).
    auto& readers = input->lineage_readers;
    if (readers.size() == readers.capacity()) {
      std::erase_if(readers, [](const BufferRoot::LineageReader& r) { return reader_done(r); });
      if (readers.size() > readers.capacity() / 2) readers.reserve(2 * readers.capacity());  // amortised
    }
    readers.push_back({root, copy, lineage->regions[i], lineage, i, host_version, version_writer});
    input->has_lineage_readers.store(true, std::memory_order_release);
  }
}

// Host-to-host: when the view's data is valid only in a modified copy of
// exactly its region on another node, and no copy is here yet, that node
// sends it to `link` directly (NodeLink::copy_from). The new copy is its
// twin: modified too (the host is still stale), with the same lineage, so
// losing either node loses nothing. Null when that is not the case, or the
// move failed (the caller brings the data home and ships it, as always).
// The root's lock is held.
std::shared_ptr<RemoteCopy> copy_between_nodes(const BufferState& view, NodeLink& link) {
  BufferRoot& root = *view.root;
  std::shared_ptr<RemoteCopy> source;
  for (const auto& copy : root.copies) {
    if (!copy->region.overlaps(view.region)) continue;
    if (copy->link == &link && !lost(*copy)) return nullptr;  // a copy is here already
    if (!copy->modified) continue;
    if (copy->region != view.region || lost(*copy)) return nullptr;  // the general path sorts these out
    if (!source) source = copy;
  }
  if (!source) return nullptr;
  const HostRegion shape = host_region(view);
  const auto id = link.copy_from(*source->link, source->id, shape);
  if (!id) return nullptr;
  auto twin = std::make_shared<RemoteCopy>();
  twin->link = &link;
  twin->epoch = link.epoch();
  twin->region = view.region;
  twin->id = *id;
  twin->bytes = shape.bytes();
  twin->modified = true;
  twin->lineage = source->lineage;
  twin->writes_since_home = source->writes_since_home;
  twin->last_use = use_clock.fetch_add(1);
  twin->pins = 1;
  link.hold(view.root);
  root.copies.push_back(twin);
  count_copies(root);
  return twin;
}

}  // namespace

std::uint64_t acquire_on_node(const BufferState& view, AccessMode mode, NodeLink& link) {
  const BufferLabelScope label(view.name);
  BufferRoot& root = *view.root;
  // Shipped from the host: a GPU's pages of a unified root come back first.
  unified_to_host(root, view.region);
  if (writes(mode)) settle_lineage_readers(root, view.region);
  std::unique_lock replay_guard(replay_mutex(), std::defer_lock);
  RootLock lock = lock_for(root, view.region, replay_guard);
  if (!replaying) root.shipped.wait(lock, [&] { return !in_flight_overlaps(root, view.region); });
  if (reads(mode)) {
    if (auto twin = copy_between_nodes(view, link)) {
      lock.unlock();
      for (const auto& entry : twin->lineage) note_lineage_reads(view.root, twin, entry);
      return twin->id;
    }
  }
  std::shared_ptr<RemoteCopy> exact;
  const auto is_exact = [&](const RemoteCopy& copy) {
    return copy.link == &link && copy.region == view.region && !lost(copy);
  };
  bool others = false;
  for (const auto& copy : root.copies)
    if (copy->region.overlaps(view.region)) {
      if (is_exact(*copy)) exact = copy;
      else others = true;
    }
  // Modified data elsewhere (another node, or another region of this one)
  // comes home first: the host is where copies are made from. That changes
  // the list, so over a copy of it; a chain's task finds only its own copy
  // and copies nothing.
  if (others)
    for (auto& copy : std::vector(root.copies)) {
      if (!copy->region.overlaps(view.region)) continue;
      if (is_exact(*copy)) {
        exact = copy;
        continue;
      }
      if (copy->modified) bring_home(root, *copy);
      if (lost(*copy)) remove_copy(root, copy, /*drop=*/false);
    }
  if (exact) {
    exact->last_use = use_clock.fetch_add(1);
    ++exact->pins;
    if (writes(mode)) ++exact->writes_since_home;
    return exact->id;
  }
  auto copy = std::make_shared<RemoteCopy>();
  copy->link = &link;
  copy->epoch = link.epoch();
  copy->region = view.region;
  copy->bytes = host_region(view).bytes();
  link.hold(view.root);
  if (reads(mode) && !replay_guard.owns_lock() && !replaying) {
    // No copy of the region anywhere and no task writing it (this one reads
    // it, so writers wait for it).
    copy->id = ship_unlocked(root, lock, view, link);
  } else {
    copy->id = reads(mode) ? link.ship(host_region(view)) : link.allocate(host_region(view));
  }
  copy->last_use = use_clock.fetch_add(1);
  copy->pins = 1;
  copy->writes_since_home = writes(mode) ? 1 : 0;
  root.copies.push_back(copy);
  count_copies(root);
  return copy->id;
}

std::size_t lineage_limit(std::size_t bytes) noexcept { return std::max<std::size_t>(4096, bytes / (16 << 10)); }

namespace {

// The copy of the view on `link` due for a checkpoint, if any; root locked.
std::shared_ptr<RemoteCopy> due_copy(BufferRoot& root, const BufferState& view, NodeLink& link) {
  for (const auto& copy : root.copies)
    if (copy->link == &link && copy->region == view.region && copy->checkpoint_due() && !lost(*copy))
      return copy;
  return nullptr;
}

}  // namespace

bool checkpoint_due(const BufferState& view, NodeLink& link) {
  RootLock lock(view.root->transfer_mutex);
  return due_copy(*view.root, view, link) != nullptr;
}

bool checkpoint_on_node(const BufferState& view, NodeLink& link) {
  const BufferLabelScope label(view.name);
  BufferRoot& root = *view.root;
  std::unique_lock replay_guard(replay_mutex(), std::defer_lock);
  RootLock lock = lock_for(root, view.region, replay_guard);
  const std::shared_ptr<RemoteCopy> due = due_copy(root, view, link);  // kept: bring_home may change root.copies
  if (!due) return false;
  bring_home(root, *due);
  return true;
}

void release_on_node(const BufferState& view, NodeLink& link, std::uint64_t id) {
  BufferRoot& root = *view.root;
  RootLock lock(root.transfer_mutex);
  for (auto& copy : root.copies)
    if (copy->link == &link && copy->id == id && copy->pins > 0) --copy->pins;
}

std::size_t evict_from_node(NodeLink& link, const std::vector<std::shared_ptr<BufferRoot>>& roots, std::size_t bytes) {
  struct Candidate {
    std::uint64_t last_use;
    BufferRoot* root;
    std::shared_ptr<RemoteCopy> copy;
  };
  std::vector<Candidate> candidates;
  for (const auto& root : roots) {
    RootLock lock(root->transfer_mutex, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    for (const auto& copy : root->copies)
      if (copy->link == &link && copy->pins == 0 && !lost(*copy)) candidates.push_back({copy->last_use, root.get(), copy});
  }
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
  std::size_t freed = 0;
  for (const auto& c : candidates) {
    if (freed >= bytes) break;
    RootLock lock(c.root->transfer_mutex, std::try_to_lock);
    if (!lock.owns_lock() || c.copy->pins != 0) continue;
    if (std::find(c.root->copies.begin(), c.root->copies.end(), c.copy) == c.root->copies.end()) continue;
    if (c.copy->modified) bring_home(*c.root, *c.copy);
    remove_copy(*c.root, c.copy, /*drop=*/true);
    freed += c.copy->bytes;
  }
  return freed;
}

void written_on_node(const BufferState& view, NodeLink& link, std::uint64_t id, std::shared_ptr<LineageEntry> lineage) {
  BufferRoot& root = *view.root;
  std::shared_ptr<RemoteCopy> mine;
  {
    RootLock lock(root.transfer_mutex);
    // A ship of the region still on its way (a prefetch) carries the
    // version this write replaces, and its copy is listed only once it
    // lands: waited for, so that it is found stale below, not after.
    root.shipped.wait(lock, [&] { return !shipping_overlaps(root, view.region); });
    const auto is_mine = [&](const RemoteCopy& copy) { return copy.link == &link && copy.id == id; };
    bool stale = false;
    for (const auto& copy : root.copies) {
      if (is_mine(*copy)) mine = copy;
      else stale = stale || copy->region.overlaps(view.region);
    }
    // Stale now. Removing them changes the list, so over a copy of it; the
    // usual write (a chain's) finds none and copies nothing.
    if (stale)
      for (auto& copy : std::vector(root.copies))
        if (!is_mine(*copy) && copy->region.overlaps(view.region)) remove_copy(root, copy, /*drop=*/true);
    if (!mine) return;
    mine->modified = true;
    if (lineage) mine->lineage.push_back(lineage);
  }
  if (lineage) note_lineage_reads(view.root, mine, lineage);
}

namespace {

// A modified copy that can come home without the lock: on a live node, the
// only one of its region (no twin to fall back on), and a lineage that
// writes its region whole (a failed fetch may then leave the host's bytes
// half overwritten: the recomputation replaces them all).
bool may_fetch_unlocked(const BufferRoot& root, const RemoteCopy& copy) {
  if (lost(copy) || lineage_reads(root, copy) || overlaps_any(root.homing, copy.region)) return false;
  return std::none_of(root.copies.begin(), root.copies.end(), [&](const auto& other) { return twins(*other, copy); });
}

// Fetches `copy` home with the root's lock released (held on entry and on
// return), so the pieces of one buffer come home back to back. Pinned
// meanwhile (eviction leaves it alone) and listed in `homing` (host users
// and acquires of an overlapping region wait). A failure falls back to
// bring_home, which recomputes from the lineage, taking the replay lock
// before the root's as every replay does.
void fetch_home_unlocked(BufferRoot& root, RootLock& lock, const std::shared_ptr<RemoteCopy>& copy) {
  preserve_host_bytes(root, copy->region);
  root.homing.push_back(copy->region);
  ++copy->pins;
  const HostRegion dest = host_region(root, copy->region);
  lock.unlock();
  bool fetched = true;
  try {
    copy->link->fetch(copy->id, dest);
  } catch (const RemoteError& e) {
    log().warn("fetching a buffer back failed ({}); recomputing it", e.what());
    fetched = false;
  }
  lock.lock();
  --copy->pins;
  root.homing.erase(std::find(root.homing.begin(), root.homing.end(), copy->region));
  root.shipped.notify_all();
  if (fetched) return home_now(root, *copy);
  lock.unlock();
  std::lock_guard replay_guard(replay_mutex());
  lock.lock();
  const bool still = std::find(root.copies.begin(), root.copies.end(), copy) != root.copies.end();
  if (still && copy->modified) bring_home(root, *copy);
}

// Host use of the view's data, as far as copies on other nodes go.
void settle_copies_for_host(const BufferState& view, AccessMode mode) {
  BufferRoot& root = *view.root;
  if (writes(mode) && root.has_lineage_readers.load(std::memory_order_acquire)) {
    settle_lineage_readers(root, view.region);
    // The task about to run here writes them. Under the replay lock: a
    // replay in progress may be reading them as the version it needs (its
    // copy already marked home, so no longer a reader here).
    std::lock_guard replay_guard(replay_mutex());
    RootLock lock(root.transfer_mutex);
    preserve_host_bytes(root, view.region);
  }
  if (root.copy_count.load(std::memory_order_acquire) == 0) return;
  std::unique_lock replay_guard(replay_mutex(), std::defer_lock);
  RootLock lock = lock_for(root, view.region, replay_guard);
  if (!replaying)
    root.shipped.wait(lock, [&] {
      return !overlaps_any(root.homing, view.region) && (!writes(mode) || !shipping_overlaps(root, view.region));
    });
  for (auto& copy : std::vector(root.copies)) {
    if (!copy->region.overlaps(view.region)) continue;
    if (copy->modified) {
      if (!replay_guard.owns_lock() && !replaying && may_fetch_unlocked(root, *copy))
        fetch_home_unlocked(root, lock, copy);
      else
        bring_home(root, *copy);
    }
    if (std::find(root.copies.begin(), root.copies.end(), copy) == root.copies.end()) continue;  // gone meanwhile
    if (writes(mode) || lost(*copy)) remove_copy(root, copy, /*drop=*/true);
  }
}

}  // namespace

void acquire_on_host(const BufferState& view, AccessMode mode) {
  const BufferLabelScope label(view.name);
  settle_copies_for_host(view, mode);
  unified_to_host(*view.root, view.region);
}

void acquire_unified(const BufferState& view, AccessMode mode) { settle_copies_for_host(view, mode); }

void prefetch_on_node(const BufferState& view, NodeLink& link, const std::function<bool()>& writer_pending) {
  const BufferLabelScope label(view.name);
  BufferRoot& root = *view.root;
  RootLock lock(root.transfer_mutex);
  // Checked under the lock: a writer that starts later must first take it
  // (acquire_on_host) and wait for the region's ship (`shipping`), so it
  // cannot change the data while it is shipped.
  if (writer_pending()) return;
  // Pages a GPU may still be using stay there: the task's own run moves them.
  if (root.unified && root.unified_device.load(std::memory_order_acquire) >= 0) return;
  if (in_flight_overlaps(root, view.region)) return;  // on its way already, for a task
  for (const auto& copy : root.copies) {
    if (!copy->region.overlaps(view.region)) continue;
    if (copy->modified || lost(*copy)) return;  // the task's own run sorts these out
    if (copy->link == &link && copy->region == view.region) return;  // already there
  }
  auto copy = std::make_shared<RemoteCopy>();
  copy->link = &link;
  copy->epoch = link.epoch();
  copy->region = view.region;
  copy->bytes = host_region(view).bytes();
  copy->id = ship_unlocked(root, lock, view, link);
  copy->last_use = use_clock.fetch_add(1);
  link.hold(view.root);
  root.copies.push_back(copy);
  count_copies(root);
}

void forget_node(BufferRoot& root, NodeLink& link) {
  std::lock_guard replay_guard(replay_mutex());
  RootLock lock(root.transfer_mutex);
  // A fetch home in flight from the lost node fails now: no byte of it may
  // land after a recomputation below writes the region.
  root.shipped.wait(lock, [&] { return root.homing.empty(); });
  for (auto& copy : std::vector(root.copies)) {
    if (copy->link != &link) continue;
    if (copy->modified) bring_home(root, *copy);
    remove_copy(root, copy, /*drop=*/false);
  }
}

void discard_on_node(const BufferState& view, NodeLink& link, std::uint64_t id) {
  BufferRoot& root = *view.root;
  RootLock lock(root.transfer_mutex);
  for (auto& copy : std::vector(root.copies))
    if (copy->link == &link && copy->id == id && copy->pins == 0) remove_copy(root, copy, /*drop=*/true);
}

std::vector<MemoryNodeId> valid_nodes(const BufferState& view, const std::vector<MemoryNodeId>& in_place) {
  std::vector<MemoryNodeId> nodes;
  BufferRoot& root = *view.root;
  RootLock lock(root.transfer_mutex);
  bool host_valid = true;
  for (const auto& copy : root.copies) {
    if (!copy->region.overlaps(view.region)) continue;
    host_valid = host_valid && !copy->modified;
    if (copy->region == view.region) nodes.push_back(copy->link->node());
  }
  if (host_valid) nodes.push_back(host_node);
  if (host_valid && root.unified) nodes.insert(nodes.end(), in_place.begin(), in_place.end());
  return nodes;
}

void keep_lineage_inputs(BufferRoot& root) noexcept {
  if (!root.has_lineage_readers.load(std::memory_order_acquire)) return;
  const Region whole{0, 0, root.rows, root.cols};
  try {
    // A replay of those readers could no longer reach this root (its weak
    // references are expired from here on): the copies whose lineage read a
    // newer version than the host's come home now, while the data they read
    // still lives; the host's bytes are copied aside for the others.
    Ending now{&root, {}};
    {
      RootLock lock(root.transfer_mutex);
      for (const auto& r : root.lineage_readers)
        if (const auto entry = r.entry.lock()) {
          now.named = entry->roots[r.arg];
          break;
        }
    }
    const Scoped ending_while(ending, now);
    settle_lineage_readers(root, whole);
    RootLock lock(root.transfer_mutex);
    preserve_host_bytes(root, whole);
  } catch (const std::exception& e) {
    log().warn("a buffer freed while results computed from it were only on a remote: keeping what they read "
               "failed ({}); recomputing them, if their host is lost, fails",
               e.what());
  }
}

void drop_copies(BufferRoot& root) noexcept {
  // No lock: nothing else can reach a root that is being destroyed.
  for (const auto& copy : root.copies)
    if (!lost(*copy)) copy->link->drop(copy->id);
  root.copies.clear();
  root.copy_count.store(0, std::memory_order_release);
}

}  // namespace ferry::detail
