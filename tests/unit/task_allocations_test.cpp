// What a local task costs the heap, counted (never timed): an empty task
// takes nothing from it, a chained one (readwrite on one buffer, its order
// inferred) only its argument lists. A task's record and lists come from
// the small-object pool; a change that moves them back to the heap, or adds
// a heap allocation per task, fails here before a benchmark shows it.
#include <gtest/gtest.h>

#include <ferry/ferry.hpp>

#include "heap_counting.hpp"

namespace {

using ferry::test::counting;
using ferry::test::heap_allocations;

constexpr int kTasks = 4000;

ferry::Runtime::Options options() {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  return o;
}

// Heap allocations per task while `submit` runs kTasks times and the runtime drains.
template <typename Submit>
double allocations_per_task(ferry::Runtime& rt, Submit submit) {
  for (int i = 0; i < kTasks; ++i) submit();  // pools, queues and models grown
  rt.wait();
  heap_allocations.store(0);
  counting.store(true);
  for (int i = 0; i < kTasks; ++i) submit();
  rt.wait();
  counting.store(false);
  return static_cast<double>(heap_allocations.load()) / kTasks;
}

TEST(TaskAllocations, AnEmptyTaskTakesNothingFromTheHeap) {
  ferry::Runtime rt(options());
  auto empty = rt.kernel("empty", [] {});
  EXPECT_LE(allocations_per_task(rt, [&] { rt.submit(empty); }), 0.05);
}

TEST(TaskAllocations, AChainedTaskTakesOnlyItsArgumentLists) {
  ferry::Runtime rt(options());
  auto touch = rt.kernel("touch", [](ferry::InOut<double>) {});
  auto x = rt.buffer<double>(1);
  // The call's argument list and the record's KernelArgs: two std::vectors.
  EXPECT_LE(allocations_per_task(rt, [&] { rt.submit(touch, ferry::readwrite(x)); }), 2.05);
}

}  // namespace
