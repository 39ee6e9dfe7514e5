#include "thread_cache.hpp"

#include <mutex>
#include <vector>

#include "slab_pool_engine.hpp"

namespace ferry::detail {

thread_local LastCache tls_last_cache __attribute__((tls_model("initial-exec")));

namespace {

// Taken on a thread's first use of a pool, at thread exit and at pool
// destruction: never on the allocation fast path.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

struct ThreadCaches {
  std::vector<ThreadCache*> caches;

  ~ThreadCaches() {
    std::lock_guard lock(registry_mutex());
    for (ThreadCache* cache : caches) {
      if (cache->owner != nullptr) {
        cache->owner->drain(*cache);
        cache->owner->unregister_cache(cache);
      }
      delete cache;
    }
    tls_last_cache = {};
  }
};

thread_local ThreadCaches tls_caches;

}  // namespace

ThreadCache& thread_cache_slow(SlabPoolEngine& pool, std::uint64_t pool_id) {
  auto& mine = tls_caches.caches;
  ThreadCache* found = nullptr;
  for (ThreadCache* cache : mine)
    if (cache->pool_id == pool_id) found = cache;
  if (found == nullptr) {
    std::lock_guard lock(registry_mutex());
    // Drop caches whose pools died, so a thread that outlives many pools does not collect them.
    std::erase_if(mine, [](ThreadCache* cache) {
      if (cache->owner != nullptr) return false;
      delete cache;
      return true;
    });
    auto cache = std::make_unique<ThreadCache>(&pool, pool_id);
    mine.push_back(cache.get());
    pool.register_cache(cache.get());
    found = cache.release();
  }
  tls_last_cache = {pool_id, found};
  return *found;
}

ThreadCache* find_thread_cache(std::uint64_t pool_id) noexcept {
  for (ThreadCache* cache : tls_caches.caches)
    if (cache->pool_id == pool_id) return cache;
  return nullptr;
}

void orphan_thread_caches(SlabPoolEngine& pool) {
  std::lock_guard lock(registry_mutex());
  for (ThreadCache* cache : pool.caches()) cache->owner = nullptr;
}

}  // namespace ferry::detail
