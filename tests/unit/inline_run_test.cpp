// Options::inline_below_seconds: a short task that is ready when submitted
// runs on the submitting thread once its model knows it is short; a longer
// one, or any task with the option off, goes to the workers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "runtime_test_support.hpp"

namespace {

using ferry::InOut;

struct Threads {
  std::atomic<int> here{0}, elsewhere{0};
};

ferry::KernelRef note_thread(ferry::Runtime& rt, Threads& seen, std::thread::id submitter) {
  return rt.kernel("note_thread", [&seen, submitter](InOut<float> x) {
    x[0] += 1;
    (std::this_thread::get_id() == submitter ? seen.here : seen.elsewhere).fetch_add(1);
  });
}

TEST(InlineRun, ShortReadyTasksRunOnTheSubmittingThreadOnceCalibrated) {
  auto options = ferry::testing::quiet_options();
  options.workers = 2;
  options.inline_below_seconds = 1.0;  // everything here is short
  ferry::Runtime rt(options);
  Threads seen;
  auto kernel = note_thread(rt, seen, std::this_thread::get_id());
  auto x = rt.buffer<float>(1);
  for (int i = 0; i < 20; ++i) rt.submit(kernel, ferry::readwrite(x), ferry::on(ferry::cpu())).wait();
  EXPECT_GT(seen.here.load(), 0) << "no task ran inline";
  EXPECT_GE(seen.elsewhere.load(), 1) << "the uncalibrated first runs must go to the workers";
  EXPECT_EQ(x.host()[0], 20.0f);
}

TEST(InlineRun, NeverWhenOffOrWhenTheTaskIsLongerThanTheThreshold) {
  for (double below : {0.0, 1e-12}) {  // off; and shorter than any real kernel
    auto options = ferry::testing::quiet_options();
    options.workers = 2;
    options.inline_below_seconds = below;
    ferry::Runtime rt(options);
    Threads seen;
    auto kernel = note_thread(rt, seen, std::this_thread::get_id());
    auto x = rt.buffer<float>(1);
    for (int i = 0; i < 20; ++i) rt.submit(kernel, ferry::readwrite(x)).wait();
    EXPECT_EQ(seen.here.load(), 0) << "threshold " << below;
    EXPECT_EQ(seen.elsewhere.load(), 20) << "threshold " << below;
  }
}

}  // namespace
