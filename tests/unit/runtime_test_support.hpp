// Shared helpers for the runtime tests: a runtime that keeps its performance
// models in memory, a rendezvous that proves two tasks ran at once, the
// dependency edges a traced runtime recorded, built-in kernels by name, and
// an environment variable set for one scope.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "../support/scoped_env.hpp"
#include "ferry/ferry.hpp"

namespace ferry::testing {

inline Runtime::Options quiet_options(unsigned workers = 2) {
  Runtime::Options o;
  o.workers = workers;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // a test that wants a GPU asks for one (the library's default is every GPU)
  return o;
}

// The same, recording a trace: the dependency edges every task waited for.
inline Runtime::Options traced_options(unsigned workers = 2) {
  Runtime::Options o = quiet_options(workers);
  o.trace = true;
  return o;
}

// The spans of a traced runtime's finished tasks, by task id.
inline std::map<std::uint64_t, TaskSpan> spans_by_task(const Runtime& rt) {
  std::map<std::uint64_t, TaskSpan> spans;
  if (rt.trace() != nullptr)
    for (TaskSpan& span : rt.trace()->tasks()) spans.emplace(span.task_id, std::move(span));
  return spans;
}

// Whether `later` waited for `earlier`: the trace lists the edge, and
// `later` started only once `earlier` had ended. Call after both finished.
inline ::testing::AssertionResult waited_for(const Runtime& rt, const Task& later, const Task& earlier) {
  const auto spans = spans_by_task(rt);
  const auto a = spans.find(later.id());
  const auto b = spans.find(earlier.id());
  if (a == spans.end() || b == spans.end()) return ::testing::AssertionFailure() << "a task is missing from the trace";
  const auto& preds = a->second.predecessors;
  if (std::find(preds.begin(), preds.end(), earlier.id()) == preds.end())
    return ::testing::AssertionFailure() << "no edge from task " << earlier.id() << " to task " << later.id();
  if (a->second.start_ns < b->second.end_ns)
    return ::testing::AssertionFailure() << "task " << later.id() << " started before task " << earlier.id()
                                         << " ended";
  return ::testing::AssertionSuccess();
}

// Whether neither task waited for the other.
inline ::testing::AssertionResult independent(const Runtime& rt, const Task& a, const Task& b) {
  const auto spans = spans_by_task(rt);
  for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    const auto it = spans.find(x->id());
    if (it == spans.end()) return ::testing::AssertionFailure() << "task " << x->id() << " is missing from the trace";
    const auto& preds = it->second.predecessors;
    if (std::find(preds.begin(), preds.end(), y->id()) != preds.end())
      return ::testing::AssertionFailure() << "task " << x->id() << " waited for task " << y->id();
  }
  return ::testing::AssertionSuccess();
}

// A built-in kernel from the global registry; throws if there is none.
inline const KernelDef& builtin_kernel(const std::string& name) {
  const KernelDef* k = KernelRegistry::global().find(name);
  if (k == nullptr) throw std::runtime_error("no built-in kernel " + name);
  return *k;
}

using ferry::test::ScopedEnv;

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
