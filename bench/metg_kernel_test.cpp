// The METG plugin's stencil point (metg_kernel.cpp), as a local runtime
// runs it: the same bits as the serial reference the benchmark checks
// against, and bad calls refused at submit with nothing run.
#include <gtest/gtest.h>

#include <array>
#include <ferry/ferry.hpp>
#include <initializer_list>
#include <string>

#include "metg_stencil.hpp"

namespace {

namespace metg = ferry::bench::metg;

class MetgKernel : public ::testing::Test {
 protected:
  static ferry::Runtime::Options options() {
    ferry::Runtime::Options o;
    o.workers = 2;
    o.persist_perf_models = false;
    o.read_environment = false;
    o.gpus = "none";
    return o;
  }
  void SetUp() override {
    rt.load_plugin(FERRY_METG_PLUGIN);
    for (std::size_t i = 0; i < 3; ++i) {
      auto h = in[i].host();
      h[0] = 0.5 * static_cast<double>(i);
      h[1] = metg::initial(i);
    }
  }

  // Expects submit to throw UsageError naming `fragment`, then checks that
  // nothing ran (out keeps its value) and that the runtime still works.
  template <typename Submit>
  void refused(Submit submit, const char* fragment) {
    try {
      submit();
      ADD_FAILURE() << "accepted";
    } catch (const ferry::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    rt.wait();
    EXPECT_EQ(out.host_read()[1], -1.0) << "something ran";
    rt.submit("metg_point", ferry::read(in[0]), ferry::read(in[1]), ferry::read(in[2]), ferry::write(out), 3);
    EXPECT_NE(out.host_read()[1], -1.0) << "the runtime is not usable after a refusal";
  }

  ferry::Runtime rt{options()};
  std::array<ferry::Buffer<double>, 3> in{rt.buffer<double>(2), rt.buffer<double>(2), rt.buffer<double>(2)};
  ferry::Buffer<double> out = rt.buffer<double>(std::span<const double>(std::initializer_list<double>{-1.0, -1.0}));
};

TEST_F(MetgKernel, GivesTheSerialReferencesBits) {
  for (const long iterations : {0L, 1L, 7L, 1000L}) {
    rt.submit("metg_point", ferry::read(in[0]), ferry::read(in[1]), ferry::read(in[2]), ferry::write(out), iterations);
    const double left[2] = {0.0, metg::initial(0)}, mid[2] = {0.5, metg::initial(1)}, right[2] = {1.0, metg::initial(2)};
    double expected[2];
    metg::point(iterations, left, mid, right, expected);
    const auto h = out.host_read();
    EXPECT_EQ(h[0], expected[0]) << iterations << " iterations";
    EXPECT_EQ(h[1], expected[1]) << iterations << " iterations";
  }
}

TEST_F(MetgKernel, TheSerialStencilFollowsItsNeighbours) {
  // Two steps of width 3 by hand: point 1 of step 2 depends on all three.
  const auto row = metg::serial(3, 2, 0);
  const double a0 = metg::mix(1, 1, 2), a1 = metg::mix(1, 2, 3), a2 = metg::mix(2, 3, 3);
  EXPECT_EQ(row[1], metg::mix(a0, a0, a1));
  EXPECT_EQ(row[3], metg::mix(a0, a1, a2));
  EXPECT_EQ(row[5], metg::mix(a1, a2, a2));
}

TEST_F(MetgKernel, RefusesAPointOfTheWrongSize) {
  auto wide = rt.buffer<double>(3);
  refused([&] { rt.submit("metg_point", ferry::read(wide), ferry::read(in[1]), ferry::read(in[2]), ferry::write(out), 1); },
          "a point is 2 contiguous doubles");
}

TEST_F(MetgKernel, RefusesNegativeIterations) {
  refused([&] { rt.submit("metg_point", ferry::read(in[0]), ferry::read(in[1]), ferry::read(in[2]), ferry::write(out), -1); },
          "iterations must not be negative");
}

}  // namespace
