// The machinery behind SlabPool: the central store (size-class runs and
// best-fit free spans) under one lock, in front of it the thread caches.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ferry/allocator/slab_pool.hpp"
#include "page_map.hpp"
#include "span.hpp"
#include "thread_cache.hpp"

namespace ferry::detail {

class SlabPoolEngine {
 public:
  SlabPoolEngine(std::unique_ptr<SlabSource> source, const SlabPool::Options& options);
  ~SlabPoolEngine();

  void* allocate(std::size_t bytes, std::size_t alignment);
  void deallocate(void* ptr, std::size_t bytes);

  void trim();
  void flush_thread_cache();
  void add_observer(SlabObserver& observer);
  void remove_observer(SlabObserver& observer);
  bool owns(const void* ptr) const noexcept;
  std::size_t block_bytes(const void* ptr) const;
  SlabPool::Stats stats() const;
  std::string describe() const;

  const SlabPool::Options& options() const noexcept { return options_; }
  const SlabSource& source() const noexcept { return *source_; }

  // For the thread-cache registry (which holds its own mutex, taken before ours).
  void register_cache(ThreadCache* cache) { caches_.push_back(cache); }
  void unregister_cache(ThreadCache* cache) { std::erase(caches_, cache); }
  const std::vector<ThreadCache*>& caches() const noexcept { return caches_; }
  void drain(ThreadCache& cache);

 private:
  void* allocate_small(unsigned cls);
  void* allocate_large(std::size_t bytes, std::size_t alignment);
  void free_small(Span* span, std::uintptr_t addr, std::size_t bytes);
  void free_large(Span* span, std::uintptr_t addr, std::size_t bytes);
  void invalid_free(const void* ptr, std::size_t bytes, const std::string& why);
  void refill(ThreadCache::Bin& bin, unsigned cls);
  // Gives back all but `keep` of the bin's blocks: to the transfer store
  // when `transfer` (a full cache, as on a thread that frees what another
  // made), else, and once the store is full, to their runs.
  void flush(ThreadCache::Bin& bin, std::uint32_t keep, bool transfer = false);
  void return_transfers();  // mutex_ held

  // Everything below runs with mutex_ held.
  std::uint32_t take_blocks(unsigned cls, CachedBlock* out, std::uint32_t count);
  void return_block(Span* run, std::uintptr_t addr);
  Span* new_run(unsigned cls);
  void release_run(Span* run);
  Span* carve(std::size_t pages, std::size_t alignment);
  void grow(std::size_t pages, std::size_t alignment);
  Span* split(Span* span, std::size_t head_pages);
  void make_free(Span* span);
  void release_slab(Span* whole);
  void retire_dedicated(Span* whole);
  bool release_retained(std::size_t at_least);
  bool whole_and_free(const SlabRecord& slab, Span** span) const;
  void insert_free(Span* span);
  void erase_free(Span* span);
  void push_run(Span* run);
  void unlink_run(Span* run);
  Span* new_span();
  void recycle(Span* span);
  [[noreturn]] void out_of_memory(std::size_t bytes, const std::string& why, const std::string& state) const;
  std::string describe_locked() const;

  std::unique_ptr<SlabSource> source_;
  SlabPool::Options options_;
  bool throw_on_invalid_free_;
  std::uint64_t id_;
  PageMap map_;

  mutable std::mutex mutex_;
  std::multimap<std::size_t, Span*> free_spans_;  // by pages: best fit is lower_bound
  Span* runs_[kClasses] = {};                       // runs with at least one free block
  // Blocks a full thread cache gave back, kept whole for the next empty
  // one: where blocks are made on one thread and freed on another (task
  // records, a request's reply slot), they move between the two caches in
  // bulk rather than one by one through the runs' bitmaps. They count as
  // handed out, as cached blocks do; trim() and flush_thread_cache()
  // return them to their runs.
  struct Transfer {
    std::uint32_t count = 0;
    CachedBlock slots[kTransferBlocks];
  };
  Transfer transfer_[kClasses];
  std::deque<Span> span_storage_;                   // records are reused, never freed: a racing
  Span* unused_ = nullptr;                          // lookup always reads a valid record
  std::vector<std::unique_ptr<SlabRecord>> slabs_;
  std::vector<SlabObserver*> observers_;
  SlabPool::Stats stats_;
  std::atomic<std::size_t> invalid_frees_{0};

  std::vector<ThreadCache*> caches_;  // guarded by the thread-cache registry mutex
};

}  // namespace ferry::detail
