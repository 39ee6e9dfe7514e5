// When an offload device may ship a task's input ahead of its run
// (prefetch_too_early), decided from the buffer's access history alone: the
// task records are made and registered here as the core registers them,
// on real buffers of a real runtime.
#include <gtest/gtest.h>

#include <vector>

#include "data/dependencies.hpp"
#include "data/task_record.hpp"
#include "runtime_test_support.hpp"

namespace ferry::detail {
namespace {

class PrefetchTiming : public ::testing::Test {
 protected:
  ~PrefetchTiming() override {
    clear_history(*x.state()->root);
    for (TaskRecord* task : tasks) release(task);
  }

  // A task that used `view` with `mode`, as submitted: its edges made, the
  // submit's own hold on `pending` let go.
  TaskRecord* submitted(const BufferState& view, AccessMode mode) {
    auto* task = new TaskRecord;
    task->id = tasks.size() + 1;
    tasks.push_back(task);
    register_access(task, view, mode);
    task->pending.fetch_sub(1, std::memory_order_acq_rel);
    return task;
  }

  // What the core does when a task ends: its successors lose one predecessor.
  static void finished(TaskRecord* task) {
    task->done.store(true, std::memory_order_release);
    std::lock_guard lock(task->mutex);
    task->closed = true;
    for (auto& edge : task->successors) edge.task->predecessor_finished();
  }

  Runtime rt{testing::quiet_options(1)};
  Buffer<double> x = rt.buffer<double>(8, 4);
  std::vector<TaskRecord*> tasks;
};

// A task split into pieces: each piece writes its rows, then the whole
// (the join) registers a write of every row, so it waits for each piece. The
// pieces' inputs used to count the join as a writer still to come and were
// never prefetched: the GPU's copy engine then moved one piece at a time,
// idle while the thread that shipped it woke up.
TEST_F(PrefetchTiming, ThePiecesOfASplitTaskArePrefetchedDespiteTheirJoin) {
  auto pieces = x.split(2);
  TaskRecord* first = submitted(*pieces[0].state(), AccessMode::readwrite);
  TaskRecord* second = submitted(*pieces[1].state(), AccessMode::readwrite);
  TaskRecord* join = submitted(*x.state(), AccessMode::readwrite);
  EXPECT_EQ(join->pending.load(), 2) << "the join waits for both pieces";
  EXPECT_FALSE(prefetch_too_early(*pieces[0].state(), first));
  EXPECT_FALSE(prefetch_too_early(*pieces[1].state(), second));
}

// A later writer that superseded the record hides the writer before the
// task: while that one runs, the host's bytes are old, and the task waits.
TEST_F(PrefetchTiming, AReaderWaitsForTheWriterBeforeItThoughALaterWriteFollows) {
  TaskRecord* before = submitted(*x.state(), AccessMode::write);
  TaskRecord* reader = submitted(*x.state(), AccessMode::read);
  TaskRecord* after = submitted(*x.state(), AccessMode::write);
  EXPECT_EQ(after->pending.load(), 2) << "the later write waits for the writer before and the reader";
  EXPECT_TRUE(prefetch_too_early(*x.state(), reader)) << "shipped while the writer before still runs";
  finished(before);
  EXPECT_FALSE(prefetch_too_early(*x.state(), reader)) << "the data is final for the reader";
}

// Without a later write, a pending writer before the task holds its prefetch.
TEST_F(PrefetchTiming, AnUnfinishedWriterBeforeTheTaskHoldsItsPrefetch) {
  auto pieces = x.split(2);
  TaskRecord* writer = submitted(*x.state(), AccessMode::write);
  TaskRecord* reader = submitted(*pieces[1].state(), AccessMode::read);
  EXPECT_TRUE(prefetch_too_early(*pieces[1].state(), reader));
  finished(writer);
  EXPECT_FALSE(prefetch_too_early(*pieces[1].state(), reader));
  finished(reader);
  EXPECT_TRUE(prefetch_too_early(*pieces[1].state(), reader)) << "a finished task needs nothing shipped";
}

}  // namespace
}  // namespace ferry::detail
