// Gives the heap's freed pages back after a burst of temporaries. In a
// client the burst is a recovery: a lost host's work done again here
// (lineage replays with their packed snapshots and staging, tasks placed
// again on the CPU, fetches of what the host held). In ferryd it is a
// client's session, whose messages, staging and UCX endpoints go when it
// ends. glibc keeps what such bursts free: its mmap threshold rises to the
// largest block freed (up to 32 MiB), so later ones come from the arenas,
// whose free pages stay resident. A client that lived through a few faults
// kept 35-75 MiB that way (the soak, bench/README.md). Once the bursts have
// been quiet for a second, malloc_trim(0) returns the free pages of every
// arena, once per burst (or every `patience` of a burst that never goes
// quiet), and at once when a runtime closes. The process's malloc settings
// are left alone: they are the program's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace ferry {

class HeapTrim {
 public:
  using Clock = std::chrono::steady_clock;
  using Trim = std::function<void()>;

  static constexpr std::chrono::milliseconds quiet{1000};
  // A burst that never goes quiet (ferryd under a steady churn of sessions,
  // one ending every second or less) is trimmed this long after it began.
  static constexpr std::chrono::seconds patience{30};

  // The process's (malloc_trim is); another trim for tests.
  static HeapTrim& global();
  explicit HeapTrim(Trim trim);

  // A burst freed (or is about to free) its temporaries: something was done
  // again for a lost host (a replay, a task placed again), a session ended.
  void released(Clock::time_point now = Clock::now()) noexcept;
  // Trims if a burst came and it has been quiet since (or went on for
  // `patience`); true if it did.
  // Called by threads that tick anyway (a client's liveness watchers,
  // ferryd's main thread).
  bool tick(Clock::time_point now = Clock::now());
  // Trims at once, whether or not a burst is pending: a runtime closed, so
  // what it held is free now and its watchers, which would have ticked,
  // are gone (a client that opens a runtime per job would otherwise keep
  // each one's freed pages until the next one's watchers trim).
  void trim_now();
  // Trims done so far (ferryd's /metrics: ferry_heap_trims_total).
  std::uint64_t trims() const noexcept { return trims_.load(std::memory_order_relaxed); }

 private:
  Trim trim_;
  std::atomic<bool> pending_{false};
  std::atomic<Clock::rep> last_{0};
  std::atomic<Clock::rep> first_{0};  // 0: no burst since the last trim
  std::atomic<std::uint64_t> trims_{0};
};

}  // namespace ferry
