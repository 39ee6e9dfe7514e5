// Counts the heap allocations made through operator new while `counting` is
// on. Include it in one source file of a test program: it replaces the
// program's global operator new.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace ferry::test {

inline std::atomic<bool> counting{false};
inline std::atomic<long> heap_allocations{0};

}  // namespace ferry::test

void* operator new(std::size_t bytes) {
  if (ferry::test::counting.load(std::memory_order_relaxed))
    ferry::test::heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
