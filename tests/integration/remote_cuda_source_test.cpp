// A CUDA source kernel defined on a client without GPUs runs on ferryd's
// GPU: the client ships the source once per connection (define_kernel),
// ferryd compiles it with NVRTC when the definition arrives, within
// --compile-limit, off its progress thread. Needs a GPU on this host
// (ctest label gpu); skips visibly without.
#include <gtest/gtest.h>

#include <string>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"
#include "../unit/heavy_cuda_source.hpp"
#include "../unit/saxpy_cuda_source.hpp"

namespace {

using ferry::test::FerrydProcess;

const char* const saxpy = ferry::testing::saxpy_cuda_source;

ferry::Runtime::Options client_options(FerrydProcess& server) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // the CPU-only client of the story
  o.remotes = {server.address()};
  o.token_file = server.token_file();
  return o;
}

class RemoteCudaSource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  }
};

TEST_F(RemoteCudaSource, SaxpyRunsOnTheRemoteGpu) {
  FerrydProcess server({"--gpus", "all"});
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
  ferry::Runtime rt(client_options(server));
  ASSERT_TRUE(rt.remote_stats(server.address()).connected) << server.log();
  const auto k = rt.cuda_kernel(saxpy, "saxpy");

  const int n = 50001;
  auto x = rt.buffer<float>(n);
  auto y = rt.buffer<float>(n);
  ferry::testing::fill_saxpy_inputs(x, y, n);
  auto first = rt.submit(k, n, 2.0f, ferry::read(x), ferry::readwrite(y), ferry::on(ferry::remote(server.address())));
  first.wait();
  EXPECT_EQ(first.device(), "remote:" + server.address());
  rt.submit(k, n, 0.5f, ferry::read(x), ferry::readwrite(y), ferry::on(ferry::remote(server.address())));
  auto hy = y.host();
  for (int i = 0; i < n; i += 991) ASSERT_FLOAT_EQ(hy[i], 2.5f * static_cast<float>(i) + 1.0f) << "at " << i;
  EXPECT_EQ(rt.remote_stats(server.address()).server_tasks, 2u);
  EXPECT_TRUE(server.wait_for_log("defined kernel 'saxpy'")) << server.log();
  EXPECT_EQ(server.log().find("defined kernel 'saxpy'"), server.log().rfind("defined kernel 'saxpy'"))
      << "defined more than once on one connection:\n"
      << server.log();
}

// ferryd refuses the definition (compiled when it arrives), which fails the
// task that shipped it, with NVRTC's log.
TEST_F(RemoteCudaSource, CompileErrorOnTheRemoteFailsTheTaskWithTheLog) {
  FerrydProcess server({"--gpus", "all"});
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
  ferry::Runtime rt(client_options(server));
  const auto k = rt.cuda_kernel("extern \"C\" __global__ void broken(float* y) { y[0] = not_declared_anywhere; }",
                                "broken");
  auto y = rt.buffer<float>(4);
  rt.submit(k, ferry::readwrite(y), ferry::on(ferry::remote(server.address())));
  try {
    rt.wait();
    ADD_FAILURE() << "a kernel that does not compile ran";
  } catch (const ferry::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("not_declared_anywhere"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteCudaSource, CompileOverTheLimitIsRefusedWhileOthersRun) {
  FerrydProcess server({"--gpus", "all", "--compile-limit", "0.05"});
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
  ferry::Runtime rt(client_options(server));
  // Inlining a call tree that grows by a third per level: seconds of NVRTC.
  const auto heavy = rt.cuda_kernel(ferry::testing::heavy_cuda_source(20), "heavy", {"y"});
  auto y = rt.buffer<float>(4);
  try {
    rt.submit(heavy, ferry::write(y), 1, 1, 1, 1, 1, 1, 0, ferry::on(ferry::remote(server.address()))).wait();
    ADD_FAILURE() << "the heavy source compiled within 50 ms";
  } catch (const ferry::KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ferryd refused kernel 'heavy'"), std::string::npos) << what;
    EXPECT_NE(what.find("within the 0.05 s limit"), std::string::npos) << what;
  }
  // NVRTC still works on it in ferryd; another client's kernels compile and run meanwhile.
  ferry::Runtime other(client_options(server));
  const auto k = other.cuda_kernel(saxpy, "saxpy");
  const int n = 1000;
  auto x = other.buffer<float>(n);
  auto z = other.buffer<float>(n);
  {
    auto hx = x.host();
    auto hz = z.host();
    for (int i = 0; i < n; ++i) {
      hx[i] = 1.0f;
      hz[i] = 2.0f;
    }
  }
  other.submit(k, n, 3.0f, ferry::read(x), ferry::readwrite(z), ferry::on(ferry::remote(server.address())));
  EXPECT_EQ(z.host()[n - 1], 5.0f);
  EXPECT_TRUE(server.wait_for_log("defined kernel 'saxpy'")) << server.log();
}

TEST_F(RemoteCudaSource, RemoteWithoutGpusCannotRunIt) {
  FerrydProcess server({"--gpus", "none"});
  ASSERT_TRUE(server.wait_for_log("0 GPUs")) << server.log();
  ferry::Runtime rt(client_options(server));
  const auto k = rt.cuda_kernel(saxpy, "saxpy");
  auto x = rt.buffer<float>(8);
  auto y = rt.buffer<float>(8);
  try {
    rt.submit(k, 8, 1.0f, ferry::read(x), ferry::readwrite(y));
    ADD_FAILURE() << "submitted CUDA source where no device can run it";
  } catch (const ferry::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no device of this runtime can run it"), std::string::npos) << e.what();
  }
}

}  // namespace
