// Gives the heap's freed pages back after a recovery. A lost host's work is
// done again here: lineage replays with their packed snapshots and staging,
// tasks placed again on the CPU, fetches of what the host held. Those
// temporaries are large and come in a burst, and glibc keeps what they
// free: its mmap threshold rises to the largest block freed (up to 32 MiB),
// so later ones come from the arenas, whose free pages stay resident. A
// client that lived through a few faults kept 35-75 MiB that way (the
// soak, bench/README.md). Once recovery has been quiet for a second,
// malloc_trim(0) returns the free pages of every arena, once per burst.
// The process's malloc settings are left alone: they are the program's.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

namespace ferry::detail {

class HeapTrim {
 public:
  using Clock = std::chrono::steady_clock;
  using Trim = std::function<void()>;

  static constexpr std::chrono::milliseconds quiet{1000};

  // The process's (malloc_trim is); another trim for tests.
  static HeapTrim& global();
  explicit HeapTrim(Trim trim);

  // Something was done again for a lost host (a replay, a task placed again).
  void recovered(Clock::time_point now = Clock::now()) noexcept;
  // Trims if recovery happened and has been quiet since; true if it did.
  // Called by threads that tick anyway (the liveness watchers).
  bool tick(Clock::time_point now = Clock::now());

 private:
  Trim trim_;
  std::atomic<bool> pending_{false};
  std::atomic<Clock::rep> last_{0};
};

}  // namespace ferry::detail
