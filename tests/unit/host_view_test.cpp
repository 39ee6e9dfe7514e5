// Host views as acquisitions: a view kept across submit orders the tasks
// that would race with it, and a wait that could never end is refused.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>

#include "runtime_test_support.hpp"

namespace {

using ferry::In;
using ferry::InOut;

bool mentions(const std::exception& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

TEST(HostView, WriteThroughAViewKeptAcrossSubmitHappensBeforeTheTask) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(4);
  x.set_name("x");
  auto times10 = rt.kernel("times10", [](InOut<double> v) { v[0] *= 10; });
  auto h = x.host();
  h[0] = 1;
  ferry::Task t = rt.submit(times10, ferry::readwrite(x), ferry::named("scale"));
  // Waiting here would wait for ourselves: refused, naming the buffer and the task.
  try {
    t.wait();
    FAIL() << "a wait behind this thread's own view returned";
  } catch (const ferry::UsageError& e) {
    EXPECT_TRUE(mentions(e, "'x'")) << e.what();
    EXPECT_TRUE(mentions(e, "scale")) << e.what();
  }
  EXPECT_THROW(rt.wait(), ferry::UsageError);
  EXPECT_FALSE(t.done()) << "the task ran while a writable view of its buffer was alive";
  h[0] = 2;  // after submit, before the release: the task must see it
  h.release();
  t.wait();
  EXPECT_EQ(x.host_read()[0], 20.0);
}

TEST(HostView, AReadViewHoldsBackWritersOnly) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(8);
  x.set_name("x");
  std::ranges::fill(x.host(), 3.0);
  auto first = rt.kernel("first", [](In<double> v) { return v[0]; });
  auto bump = rt.kernel("bump", [](InOut<double> v) { v[0] += 1; });
  {
    const auto r = x.host_read();
    EXPECT_EQ(rt.submit(first, ferry::read(x)).result(), 3.0) << "a reader waited for a read-only view";
    ferry::Task writer = rt.submit(bump, ferry::readwrite(x), ferry::named("writer"));
    try {
      rt.wait();
      FAIL() << "a wait behind this thread's own view returned";
    } catch (const ferry::UsageError& e) {
      EXPECT_TRUE(mentions(e, "writer")) << e.what();
    }
    EXPECT_FALSE(writer.done());
    EXPECT_EQ(r[0], 3.0);
  }
  rt.wait();
  EXPECT_EQ(x.host_read()[0], 4.0);
}

TEST(HostView, AWritableViewHoldsBackReaders) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(8);
  auto first = rt.kernel("first", [](In<double> v) { return v[0]; });
  std::optional<ferry::Task> reader;
  {
    auto h = x.host();
    h[0] = 5;
    reader = rt.submit(first, ferry::read(x));
    EXPECT_THROW(reader->wait(), ferry::UsageError);
    h[0] = 6;
  }
  EXPECT_EQ(reader->result(), 6.0);
}

// y's writer waits for the view of x; a view of y, taken on the thread that
// holds x's, would wait for it forever: refused, naming x and the task.
TEST(HostView, AViewThatWouldWaitBehindThisThreadsViewIsRefused) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(4), y = rt.buffer<double>(4);
  x.set_name("x");
  std::optional<ferry::HostView<double>> hx(x.host());
  (*hx)[0] = 3;
  rt.submit("copy", ferry::read(x), ferry::write(y), ferry::named("x to y"));
  try {
    (void)y.host_read();
    FAIL() << "a view that waits behind this thread's own view was handed out";
  } catch (const ferry::UsageError& e) {
    EXPECT_TRUE(mentions(e, "'x'")) << e.what();
    EXPECT_TRUE(mentions(e, "x to y")) << e.what();
  }
  hx.reset();
  EXPECT_EQ(y.host_read()[0], 3.0);
}

// Only a wait that could wait for the view is refused: unrelated work may
// be waited for (and viewed) while the view holds its own task back.
TEST(HostView, WaitsForUnrelatedTasksAreAllowed) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(4), y = rt.buffer<double>(4), z = rt.buffer<double>(4);
  auto h = x.host();
  ferry::Task held = rt.submit("copy", ferry::read(x), ferry::write(y));
  ferry::Task chained = rt.submit("scal", ferry::readwrite(y), 2.0);  // behind `held`, so behind the view
  ferry::Task other = rt.submit("fill", ferry::write(z), 5.0);
  other.wait();
  EXPECT_EQ(z.host_read()[0], 5.0);
  EXPECT_THROW(chained.wait(), ferry::UsageError) << "waits behind the view through another task";
  EXPECT_FALSE(held.done());
  h.release();
  chained.wait();
}

TEST(HostView, AnotherThreadWaitsForTheRelease) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(4);
  auto times10 = rt.kernel("times10", [](InOut<double> v) { v[0] *= 10; });
  std::optional<ferry::HostView<double>> h(x.host());
  (*h)[0] = 1;
  ferry::Task t = rt.submit(times10, ferry::readwrite(x));
  std::thread waiter([&] { t.wait(); });  // not the holder: it may wait
  (*h)[0] = 7;
  h.reset();
  waiter.join();
  EXPECT_EQ(x.host_read()[0], 70.0);
}

TEST(HostView, ViewsOnOneThreadDoNotWaitForEachOther) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto x = rt.buffer<double>(4);
  auto a = x.host();
  a[1] = 2;
  const auto b = x.host_read();  // would deadlock if it waited for `a`
  EXPECT_EQ(b[1], 2.0);
  auto c = x.host();
  c[1] = 3;
  EXPECT_EQ(a[1], 3.0);
}

TEST(HostView, ARuntimeClosingUnderALiveViewDoesNotHang) {
  std::optional<ferry::HostView<double>> h;
  {
    ferry::Runtime rt(ferry::testing::quiet_options());
    auto x = rt.buffer<double>(4);
    auto times10 = rt.kernel("times10", [](InOut<double> v) { v[0] *= 10; });
    h.emplace(x.host());
    (*h)[0] = 1;
    rt.submit(times10, ferry::readwrite(x));
  }  // the runtime ends the view (with a warning) so its task runs
  SUCCEED();
}

}  // namespace
