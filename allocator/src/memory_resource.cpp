#include "ferry/allocator/memory_resource.hpp"

#include <fmt/format.h>

#include <bit>

#include "ferry/error.hpp"

namespace ferry {

const char* to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::host_pinned: return "host-pinned";
    case MemoryKind::host_pageable: return "host-pageable";
    case MemoryKind::device: return "device";
    case MemoryKind::managed: return "managed";
  }
  return "unknown";
}

void* MemoryResource::allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) {
  // Not std::has_single_bit: without -mpopcnt that is a libgcc call, on
  // every allocation of the small-object pool.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw UsageError(fmt::format("allocate({} bytes): alignment {} is not a power of two ({})", bytes, alignment,
                                 describe()));
  return do_allocate(bytes, alignment, stream);
}

void MemoryResource::deallocate(void* ptr, std::size_t bytes, StreamRef stream) {
  if (ptr == nullptr) return;
  do_deallocate(ptr, bytes, stream);
}

}  // namespace ferry
