#include "ferry/allocator/small_objects.hpp"

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/slab_pool.hpp"
#include "ferry/log.hpp"

namespace ferry {

namespace {

SlabPool& small_objects() {
  // Never destroyed: task handles and replies may outlive every runtime and
  // connection, even into static destruction.
  static SlabPool* pool = [] {
    SlabPool::Options options;
    options.slab_bytes = std::size_t{4} << 20;
    options.on_invalid_free = OnInvalidFree::throw_error;
    return new SlabPool(make_mmap_source(/*lock=*/false), options);
  }();
  return *pool;
}

}  // namespace

void* small_object_allocate(std::size_t bytes, std::size_t alignment) {
  return small_objects().allocate(bytes, alignment);
}

void small_object_deallocate(void* ptr, std::size_t bytes) noexcept {
  try {
    small_objects().deallocate(ptr, bytes);
  } catch (const std::exception& e) {
    log().error("freeing a small object: {}", e.what());
  }
}

}  // namespace ferry
