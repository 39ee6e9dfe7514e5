// Every misuse is refused at submit, before anything runs, with a message
// naming the task, the kernel and the argument; the runtime stays usable.
#include <gtest/gtest.h>

#include <atomic>

#include "runtime_test_support.hpp"

namespace {

class BadInput : public ::testing::Test {
 protected:
  // Expects submit to throw UsageError whose message contains every fragment,
  // then checks nothing ran and the runtime still works.
  template <typename Submit>
  void refused(Submit submit, std::initializer_list<const char*> fragments) {
    const std::size_t before = rt.devices().at(0).tasks_run;
    try {
      submit();
      ADD_FAILURE() << "accepted";
    } catch (const ferry::UsageError& e) {
      const std::string what = e.what();
      for (const char* fragment : fragments) EXPECT_NE(what.find(fragment), std::string::npos) << what;
    }
    rt.wait();
    EXPECT_EQ(rt.devices().at(0).tasks_run, before) << "something ran";
    auto probe = rt.buffer<double>(2);
    rt.submit("fill", ferry::write(probe), 3.0);
    EXPECT_EQ(probe.host()[1], 3.0) << "the runtime is not usable after a refusal";
  }

  ferry::Runtime rt{ferry::testing::quiet_options()};
  ferry::Buffer<double> x = rt.buffer<double>(8);
  ferry::Buffer<double> y = rt.buffer<double>(8);
  ferry::Buffer<float> f = rt.buffer<float>(8);
};

TEST_F(BadInput, UnknownKernel) {
  refused([&] { rt.submit("axpyy", ferry::read(x), ferry::readwrite(y)); }, {"unknown kernel 'axpyy'", "axpy"});
}

TEST_F(BadInput, TooFewAndTooManyArguments) {
  refused([&] { rt.submit("dot", ferry::read(x)); }, {"kernel dot", "argument"});
  refused([&] { rt.submit("nrm2", ferry::read(x), ferry::read(y)); }, {"kernel nrm2"});
}

TEST_F(BadInput, ScalarWhereABufferBelongs) {
  refused([&] { rt.submit("axpy", 2.0, ferry::readwrite(y)); }, {"kernel axpy", "argument 1 'x'"});
}

TEST_F(BadInput, MixedElementTypes) {
  refused([&] { rt.submit("axpy", ferry::read(f), ferry::readwrite(y)); }, {"kernel axpy"});
}

TEST_F(BadInput, WritingThroughAReadAccess) {
  refused([&] { rt.submit("axpy", ferry::read(x), ferry::read(y), 2.0, ferry::named("update")); },
          {"task 'update'", "kernel axpy", "argument 2 'y'", "readwrite"});
}

TEST_F(BadInput, GemmDimensionsThatDoNotFit) {
  auto a = rt.buffer<double>(3, 4);
  auto b = rt.buffer<double>(5, 2);
  auto c = rt.buffer<double>(3, 2);
  refused([&] { rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c)); }, {"kernel gemm", "4", "5"});
}

TEST_F(BadInput, PotrfOnANonSquareTile) {
  auto a = rt.buffer<double>(4, 6);
  refused([&] { rt.submit("potrf", ferry::readwrite(a)); }, {"kernel potrf"});
}

TEST_F(BadInput, BufferOfAnotherRuntime) {
  ferry::Runtime other(ferry::testing::quiet_options());
  auto theirs = other.buffer<double>(8);
  refused([&] { rt.submit("axpy", ferry::read(theirs), ferry::readwrite(y)); },
          {"argument 1 'x'", "belongs to another runtime"});
}

TEST_F(BadInput, BufferOfAGoneRuntime) {
  ferry::Buffer<double> orphan;
  {
    ferry::Runtime gone(ferry::testing::quiet_options());
    orphan = gone.buffer<double>(8);
  }
  refused([&] { rt.submit("scal", ferry::readwrite(orphan), 2.0); }, {"kernel scal", "no longer exists"});
}

TEST_F(BadInput, EmptyBuffer) {
  ferry::Buffer<double> empty;
  refused([&] { rt.submit("scal", ferry::readwrite(empty), 2.0); }, {"kernel scal", "empty"});
  EXPECT_THROW(empty.host(), ferry::UsageError);
}

TEST_F(BadInput, AliasedArgumentsWithAWrite) {
  refused([&] { rt.submit("axpy", ferry::read(x), ferry::readwrite(x), 1.0); }, {"kernel axpy", "same memory"});
  // Reading one buffer twice is fine.
  EXPECT_EQ(rt.submit("dot", ferry::read(x), ferry::read(x)).result(), 0.0);
}

// A place the runtime does not have is named, with what it has instead
// (issue 32): not "cpu: excluded by placement".
TEST_F(BadInput, PlacementWithNoMatchingDevice) {
  refused([&] { rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::gpu(0))); },
          {"kernel scal", "ferry::gpu(0)", "no GPU 0 in this runtime (it has no GPU: ", "\"none\""});
  refused([&] { rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::gpu())); },
          {"kernel scal", "no GPU in this runtime (it has no GPU: "});
  refused([&] { rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote("x"))); },
          {"kernel scal", "no remote host 'x' (the runtime has no remotes", "FERRY_REMOTES"});
  try {
    rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote("x")));
  } catch (const ferry::UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find("excluded by placement"), std::string::npos) << e.what();
  }
}

TEST_F(BadInput, UserKernelArgumentTypes) {
  auto k = rt.kernel("scale_f", [](ferry::InOut<float> v, float a) {
    for (auto& e : v) e *= a;
  });
  refused([&] { rt.submit(k, ferry::readwrite(x), 2.0); }, {"kernel scale_f", "argument 1"});
  refused([&] { rt.submit(k, ferry::readwrite(f), "two"); }, {"kernel scale_f", "argument 2"});
}

TEST_F(BadInput, TileViewsAndSplitsAreChecked) {
  auto m = rt.buffer<double>(4, 4);
  EXPECT_THROW(m.tiles(0, 2), ferry::UsageError);
  EXPECT_THROW(m.split(5), ferry::UsageError);
  auto tile = m.tiles(2, 2)(1, 1);
  EXPECT_THROW(std::ranges::fill(tile.host(), 1.0), ferry::UsageError) << "a tile is not contiguous";
  tile.host()(1, 1) = 5.0;
  EXPECT_EQ(m.host()(3, 3), 5.0);
}

}  // namespace
