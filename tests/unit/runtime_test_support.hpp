// Shared helpers for the runtime tests: a runtime that keeps its performance
// models in memory, and a rendezvous that proves two tasks ran at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "ferry/ferry.hpp"

namespace ferry::testing {

inline Runtime::Options quiet_options(unsigned workers = 2) {
  Runtime::Options o;
  o.workers = workers;
  o.persist_perf_models = false;
  o.read_environment = false;
  return o;
}

// Each of `parties` callers waits until all have arrived or the timeout
// passes; returns whether all met. Tasks that the runtime wrongly serialises
// never meet.
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}
  bool meet(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    if (++arrived_ == parties_) cv_.notify_all();
    return cv_.wait_for(lock, timeout, [&] { return arrived_ >= parties_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int parties_;
  int arrived_ = 0;
};

}  // namespace ferry::testing
