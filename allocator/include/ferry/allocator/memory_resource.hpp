// The one interface every Ferry memory pool implements, in the spirit of
// RMM's memory resources: pools sit beside each other, and statistics,
// limits and locking are adaptors that wrap any of them.
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

enum class MemoryKind {
  host_pinned,    // page-locked host memory, DMA- and RDMA-able
  host_pageable,  // ordinary host memory
  device,         // GPU memory, not addressable from the host
  managed,        // CUDA managed (unified) memory
};

const char* to_string(MemoryKind kind) noexcept;

// A CUDA stream (cudaStream_t) without dragging CUDA headers into every
// user's build. The null stream orders an operation with the legacy default
// stream; host resources ignore it.
struct StreamRef {
  void* handle = nullptr;
};

// What cudaMalloc guarantees; enough for every DMA engine and AVX-512.
inline constexpr std::size_t default_alignment = 256;

class MemoryResource {
 public:
  MemoryResource() = default;
  MemoryResource(const MemoryResource&) = delete;
  MemoryResource& operator=(const MemoryResource&) = delete;
  virtual ~MemoryResource() = default;

  // Throws UsageError for an alignment that is not a power of two and
  // OutOfMemory when the request cannot be met. A request of 0 bytes returns
  // a distinct, valid pointer.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, StreamRef stream = {});

  // `bytes` is what was asked of allocate(). A pointer this resource did not
  // hand out, or one already returned, is reported (see each pool's policy).
  void deallocate(void* ptr, std::size_t bytes, StreamRef stream = {});

  // True when memory from one may be returned to the other.
  bool is_equal(const MemoryResource& other) const noexcept { return this == &other || do_is_equal(other); }

  virtual MemoryKind kind() const noexcept = 0;
  // The CUDA device the memory belongs to; -1 for host memory.
  virtual int device() const noexcept { return -1; }
  // One line of state for error messages and reports.
  virtual std::string describe() const = 0;

 protected:
  virtual void* do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) = 0;
  virtual bool do_is_equal(const MemoryResource& /*other*/) const noexcept { return false; }
};

}  // namespace ferry
