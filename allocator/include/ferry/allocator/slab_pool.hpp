// A thread-safe pool that carves blocks out of slabs from a SlabSource:
// power-of-two size classes up to 64 KiB served from per-thread caches, and
// best-fit with coalescing of free neighbours for larger blocks. It never
// writes into the memory it manages (bookkeeping lives beside it), so it
// serves pinned, pageable and managed memory alike.
#pragma once

#include <cstddef>
#include <memory>

#include "ferry/allocator/invalid_free.hpp"
#include "ferry/allocator/memory_resource.hpp"
#include "ferry/allocator/slab.hpp"

namespace ferry {

namespace detail {
class SlabPoolEngine;
}

class SlabPool : public MemoryResource {
 public:
  struct Options {
    // The growth unit. A request larger than this gets a slab of its own.
    std::size_t slab_bytes = std::size_t{64} << 20;
    // Freed oversized slabs kept for the next large request (mapping and
    // pinning hundreds of MiB costs tens of milliseconds); more are returned
    // at once, and trim() returns all.
    std::size_t retain_dedicated_slabs = 2;
    // Per-thread caches for the small classes; off for managed memory, so
    // that blocks migrate only where they are used.
    bool thread_cache = true;
    OnInvalidFree on_invalid_free = OnInvalidFree::build_default;
  };

  struct Stats {
    std::size_t slabs = 0;
    std::size_t slab_bytes = 0;       // obtained from the source now
    std::size_t peak_slab_bytes = 0;
    std::size_t slabs_added = 0;      // over the pool's life
    std::size_t slabs_removed = 0;
    // Bytes outside the pool's central store: blocks held by users, plus
    // small blocks parked in per-thread caches.
    std::size_t bytes_out = 0;
    std::size_t invalid_frees = 0;
  };

  static constexpr std::size_t page_bytes = 4096;
  static constexpr std::size_t min_block_bytes = 64;
  static constexpr std::size_t max_small_bytes = std::size_t{64} << 10;

  explicit SlabPool(std::unique_ptr<SlabSource> source, Options options);
  ~SlabPool() override;

  // Returns every slab with no block in use to the source. Small blocks
  // parked in other threads' caches keep their slab; this thread's cache is
  // flushed first.
  void trim();
  // Returns this thread's cached blocks to the central store.
  void flush_thread_cache();

  // The observer is told about every existing slab at once, then about each
  // slab added or removed until it is removed again. It must outlive its
  // subscription.
  void add_slab_observer(SlabObserver& observer);
  void remove_slab_observer(SlabObserver& observer);

  // True when ptr lies inside one of this pool's slabs.
  bool owns(const void* ptr) const noexcept;
  // The usable size of the block at ptr (a size class or whole pages).
  // Throws UsageError when ptr is not a live block of this pool.
  std::size_t block_bytes(const void* ptr) const;

  Stats stats() const;
  const Options& options() const noexcept;
  const SlabSource& source() const noexcept;

  MemoryKind kind() const noexcept override;
  int device() const noexcept override;
  std::string describe() const override;

 protected:
  void* do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) override;

 private:
  std::unique_ptr<detail::SlabPoolEngine> engine_;
};

}  // namespace ferry
