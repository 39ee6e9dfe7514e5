// Dependencies inferred from accesses: every hazard kind, views, many
// readers. Each ordering is checked in the trace (the edge was recorded and
// the later task started after the earlier one ended), not by sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>

#include "runtime_test_support.hpp"

namespace {

using namespace std::chrono_literals;
using ferry::In;
using ferry::InOut;
using ferry::Out;

class Dependencies : public ::testing::Test {
 protected:
  ferry::Runtime rt{ferry::testing::traced_options(2)};
  ferry::KernelRef fill = rt.kernel("fill_with", [](Out<double> x, double value) {
    for (std::size_t i = 0; i < x.rows(); ++i)
      for (std::size_t j = 0; j < x.cols(); ++j) x(i, j) = value;
  });
  ferry::KernelRef first = rt.kernel("first", [](In<double> x) { return x(0, 0); });

  // After every task finished: whether `later` waited for `earlier`.
  ::testing::AssertionResult waited(const ferry::Task& later, const ferry::Task& earlier) {
    rt.wait();
    return ferry::testing::waited_for(rt, later, earlier);
  }
  ::testing::AssertionResult independent(const ferry::Task& a, const ferry::Task& b) {
    rt.wait();
    return ferry::testing::independent(rt, a, b);
  }
};

TEST_F(Dependencies, ReadAfterWriteSeesTheWrite) {
  auto x = rt.buffer<double>(16);
  auto writer = rt.submit(fill, ferry::write(x), 7.0);
  auto reader = rt.submit(first, ferry::read(x));
  EXPECT_EQ(reader.result(), 7.0);
  EXPECT_TRUE(waited(reader, writer));
}

TEST_F(Dependencies, WriteAfterReadWaitsForTheReader) {
  auto x = rt.buffer<double>(16);
  auto writer = rt.submit(fill, ferry::write(x), 1.0);
  auto reader = rt.submit(first, ferry::read(x));
  auto overwrite = rt.submit(fill, ferry::write(x), 2.0);
  EXPECT_EQ(reader.result(), 1.0);
  EXPECT_EQ(x.host()[0], 2.0);
  EXPECT_TRUE(waited(reader, writer));
  EXPECT_TRUE(waited(overwrite, reader));
}

TEST_F(Dependencies, WriteAfterWriteKeepsProgramOrder) {
  auto x = rt.buffer<double>(16);
  auto earlier = rt.submit(fill, ferry::write(x), 1.0);
  auto later = rt.submit(fill, ferry::write(x), 2.0);
  EXPECT_EQ(x.host()[0], 2.0);
  EXPECT_TRUE(waited(later, earlier));
}

TEST_F(Dependencies, ReadwriteChainRunsInOrder) {
  auto x = rt.buffer<std::int64_t>(1);
  auto step = rt.kernel("step", [](InOut<std::int64_t> x, std::int64_t k) { x[0] = x[0] * 10 + k; });
  for (std::int64_t k = 1; k <= 9; ++k) rt.submit(step, ferry::readwrite(x), k);
  EXPECT_EQ(x.host()[0], 123456789);
}

TEST_F(Dependencies, ManyReadersRunTogetherThenTheWriterWaitsForAll) {
  auto x = rt.buffer<double>(4);
  auto writer = rt.submit(fill, ferry::write(x), 3.0);
  ferry::testing::Rendezvous both(2);
  std::atomic<int> met{0}, saw_three{0};
  auto reader = rt.kernel("reader", [&](In<double> x) {
    if (both.meet(5s)) met.fetch_add(1);
    if (x[0] == 3.0) saw_three.fetch_add(1);
  });
  auto r1 = rt.submit(reader, ferry::read(x));
  auto r2 = rt.submit(reader, ferry::read(x));
  auto overwrite = rt.submit(fill, ferry::write(x), 4.0);
  rt.wait();
  EXPECT_EQ(met.load(), 2) << "two readers of one buffer were serialised";
  EXPECT_EQ(saw_three.load(), 2);
  EXPECT_EQ(x.host()[0], 4.0);
  EXPECT_TRUE(waited(r1, writer));
  EXPECT_TRUE(waited(r2, writer));
  EXPECT_TRUE(independent(r1, r2));
  EXPECT_TRUE(waited(overwrite, r1));
  EXPECT_TRUE(waited(overwrite, r2));
}

TEST_F(Dependencies, DisjointViewsRunInParallel) {
  auto m = rt.buffer<double>(8, 8);
  auto tiles = m.tiles(4, 8);  // two row blocks
  ferry::testing::Rendezvous both(2);
  std::atomic<int> met{0};
  auto touch = rt.kernel("touch", [&](InOut<double> t, double v) {
    if (both.meet(5s)) met.fetch_add(1);
    t(0, 0) = v;
  });
  auto top = rt.submit(touch, ferry::readwrite(tiles(0, 0)), 1.0);
  auto bottom = rt.submit(touch, ferry::readwrite(tiles(1, 0)), 2.0);
  rt.wait();
  EXPECT_EQ(met.load(), 2) << "writers of disjoint tiles were serialised";
  EXPECT_TRUE(independent(top, bottom));
  EXPECT_EQ(m.host()(0, 0), 1.0);
  EXPECT_EQ(m.host()(4, 0), 2.0);
}

TEST_F(Dependencies, OverlappingViewsAreOrdered) {
  auto m = rt.buffer<double>(8, 8);
  auto halves = m.split(2);          // rows 0-3 and 4-7
  auto quarter = m.tiles(2, 8)(1, 0);  // rows 2-3: inside the first half
  auto whole = rt.submit(fill, ferry::write(m), 5.0);
  auto through_view = rt.submit(first, ferry::read(quarter));  // RAW through a view
  EXPECT_EQ(through_view.result(), 5.0);
  EXPECT_TRUE(waited(through_view, whole));
  auto top = rt.submit(fill, ferry::write(halves[0]), 6.0);
  auto inside = rt.submit(first, ferry::read(quarter));
  auto outside = rt.submit(first, ferry::read(halves[1]));
  EXPECT_EQ(inside.result(), 6.0);
  EXPECT_EQ(outside.result(), 5.0);
  EXPECT_TRUE(waited(inside, top));
  EXPECT_TRUE(independent(outside, top));
  // A write of the small view, then a read of the big one, must see it.
  auto small = rt.submit(fill, ferry::write(quarter), 9.0);
  auto count_nines = rt.kernel("count_nines", [](In<double> x) {
    double n = 0;
    for (std::size_t i = 0; i < x.rows(); ++i)
      for (std::size_t j = 0; j < x.cols(); ++j) n += x(i, j) == 9.0;
    return n;
  });
  auto big = rt.submit(count_nines, ferry::read(m));
  EXPECT_EQ(big.result(), 16.0);
  EXPECT_TRUE(waited(big, small));
}

TEST_F(Dependencies, SplitCoversTheBufferExactly) {
  auto v = rt.buffer<float>(10);
  auto parts = v.split(3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].size() + parts[1].size() + parts[2].size(), 10u);
  auto set = rt.kernel("set", [](Out<float> x, float value) {
    for (auto& e : x) e = value;
  });
  for (std::size_t i = 0; i < parts.size(); ++i) rt.submit(set, ferry::write(parts[i]), static_cast<float>(i + 1));
  auto host = v.host();
  EXPECT_EQ(host[0], 1.0f);
  EXPECT_EQ(host[3], 1.0f);  // 4 + 3 + 3
  EXPECT_EQ(host[4], 2.0f);
  EXPECT_EQ(host[9], 3.0f);
  EXPECT_THROW(v.split(0), ferry::UsageError);
  EXPECT_THROW(v.split(11), ferry::UsageError);
}

TEST_F(Dependencies, HostWaitsForPendingWriters) {
  auto x = rt.buffer<double>(4);
  // The writer is held until after host() was called: a host() that did not
  // wait would return the zeros. Passing never depends on the pause.
  std::latch gate(1);
  auto gated = rt.kernel("gated_fill", [&](Out<double> x, double value) {
    gate.wait();
    for (auto& e : x) e = value;
  });
  auto writer = rt.submit(gated, ferry::write(x), 8.0);
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.count_down();
  });
  const double seen = x.host()[3];  // no explicit wait()
  opener.join();
  EXPECT_EQ(seen, 8.0);
  EXPECT_TRUE(writer.done());
}

TEST_F(Dependencies, LongReadOnlyRunsKeepHistoriesShort) {
  auto x = rt.buffer<double>(1);
  auto noop = rt.kernel("noop_read", [](In<double>) {});
  for (int i = 0; i < 20000; ++i) rt.submit(noop, ferry::read(x));
  rt.wait();
  EXPECT_EQ(x.host()[0], 0.0);  // and a later writer still works
  rt.submit(fill, ferry::write(x), 1.0);
  EXPECT_EQ(x.host()[0], 1.0);
}

}  // namespace
