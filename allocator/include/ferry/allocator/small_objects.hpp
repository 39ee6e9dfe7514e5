// One process-wide pool for the small objects a request or a task makes on
// one thread and frees on another: a task's record and lists (made on the
// submitting thread, freed by a worker), a request's reply slot (made by
// the requester, freed by the progress thread). That pattern is the one a
// general-purpose malloc handles worst; a SlabPool's per-thread caches
// absorb it. Measured on a remote chain, glibc's malloc and free were about
// a quarter of the client's time per task.
#pragma once

#include <cstddef>
#include <memory>

namespace ferry {

void* small_object_allocate(std::size_t bytes, std::size_t alignment);
void small_object_deallocate(void* ptr, std::size_t bytes) noexcept;

template <class T>
struct SmallObjectAllocator {
  using value_type = T;
  SmallObjectAllocator() noexcept = default;
  template <class U>
  SmallObjectAllocator(const SmallObjectAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(small_object_allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { small_object_deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const SmallObjectAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace ferry
