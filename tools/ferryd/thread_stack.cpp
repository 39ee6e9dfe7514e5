// A floor under the stack size that libraries ask for their threads.
//
// glibc carves a thread's static TLS out of its stack, and this process
// carries about 65 KiB of it (OpenBLAS alone has 60 KiB). civetweb, which
// serves the Prometheus endpoint, starts its threads with 100 KiB stacks, so
// they are left about 35 KiB and overflow on the first scrape (a SIGSEGV in
// vsnprintf). civetweb has no option for the size, so ferryd raises the
// request here: defined in the executable, this wins over libc's symbol for
// every library that calls it, and it only ever makes a stack larger.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

namespace {
constexpr std::size_t min_stack_bytes = std::size_t{1} << 20;
using SetStackSize = int (*)(pthread_attr_t*, std::size_t);
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, std::size_t size) {
  static const auto next = reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return next(attr, std::max(size, min_stack_bytes));
}
