// Tells ThreadSanitizer about hand-offs it cannot see: tasks pass to workers
// through oneTBB, which is not instrumented in Debian's build. No-ops otherwise.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace ferry::detail {

inline void tsan_release([[maybe_unused]] void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(addr);
#endif
}

inline void tsan_acquire([[maybe_unused]] void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(addr);
#endif
}

}  // namespace ferry::detail
