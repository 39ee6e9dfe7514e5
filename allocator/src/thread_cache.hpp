// Per-thread caches of small blocks, one per (thread, pool). The fast path is
// a thread-local compare; caches are created on a thread's first use of a
// pool, returned to their pool when the thread exits, and orphaned (then
// discarded) when the pool dies first.
#pragma once

#include <algorithm>
#include <cstdint>

#include "span.hpp"

namespace ferry::detail {

class SlabPoolEngine;

// At most this many bytes of one class wait in one thread's cache.
inline constexpr std::size_t kCacheBytesPerClass = std::size_t{256} << 10;
inline constexpr std::uint32_t kMaxCachedBlocks = 64;
// Blocks of one class kept between a cache that gave them back and one that
// takes them (SlabPoolEngine's transfer store): two full caches' worth.
inline constexpr std::uint32_t kTransferBlocks = 2 * kMaxCachedBlocks;

inline std::uint32_t cache_capacity(unsigned cls) noexcept {
  const std::size_t blocks = kCacheBytesPerClass >> class_shift(cls);
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(blocks, 4, kMaxCachedBlocks));
}

struct ThreadCache {
  struct Bin {
    std::uint32_t count = 0;
    std::uint32_t capacity = 0;
    CachedBlock slots[kMaxCachedBlocks];
  };

  explicit ThreadCache(SlabPoolEngine* pool, std::uint64_t id) : owner(pool), pool_id(id) {
    for (unsigned cls = 0; cls < kClasses; ++cls) bins[cls].capacity = cache_capacity(cls);
  }

  SlabPoolEngine* owner;  // null once the pool is gone; guarded by the registry mutex
  std::uint64_t pool_id;
  Bin bins[kClasses];
};

struct LastCache {
  std::uint64_t pool_id = 0;
  ThreadCache* cache = nullptr;
};
// Trivially constructible, so reading it costs no thread-local init guard;
// initial-exec, so a shared libferry reads it without a __tls_get_addr call.
extern thread_local LastCache tls_last_cache __attribute__((tls_model("initial-exec")));

ThreadCache& thread_cache_slow(SlabPoolEngine& pool, std::uint64_t pool_id);

inline ThreadCache& thread_cache_for(SlabPoolEngine& pool, std::uint64_t pool_id) {
  if (tls_last_cache.pool_id == pool_id) return *tls_last_cache.cache;
  return thread_cache_slow(pool, pool_id);
}

// This thread's cache for the pool, or null when it has none.
ThreadCache* find_thread_cache(std::uint64_t pool_id) noexcept;

// Called by a dying pool: its caches stay with their threads, which discard them.
void orphan_thread_caches(SlabPoolEngine& pool);

}  // namespace ferry::detail
