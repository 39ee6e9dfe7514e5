// ferryd serving a remote client with its GPUs (--gpus all): the client's
// task runs on ferryd's CUDA device, its data staged through ferryd's host
// replica. Needs a GPU on this host (ctest label gpu); skips visibly without.
#include <gtest/gtest.h>

#include <random>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "builtin_comparison.hpp"
#include "ferryd_process.hpp"

namespace {

using ferry::test::FerrydProcess;

ferry::Runtime::Options client_options(FerrydProcess& server) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // the client is the CPU-only machine of the story
  o.remotes = {server.address()};
  o.token_file = server.token_file();
  o.chunk_bytes = std::size_t{1} << 20;  // several chunks per matrix
  return o;
}

TEST(FerrydGpu, GemmPlacedRemoteRunsOnItsGpu) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  FerrydProcess server({"--gpus", "all"});
  ASSERT_TRUE(server.wait_for_log("GPUs: cuda:0", FerrydProcess::gpu_start_timeout)) << server.log();
  ferry::Runtime rt(client_options(server));
  ASSERT_TRUE(rt.remote_stats(server.address()).connected) << server.log();

  const std::size_t n = 512;
  auto a = rt.buffer<double>(n, n), b = rt.buffer<double>(n, n);
  auto here = rt.buffer<double>(n, n), there = rt.buffer<double>(n, n);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto* m : {&a, &b}) {
    auto h = m->host();
    for (double& v : h) v = u(rng);
  }
  rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(here), 1.0, 0.0, 0, 0,
            ferry::on(ferry::cpu()));
  auto t = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(there), 1.0, 0.0, 0, 0,
                     ferry::on(ferry::remote(server.address())));
  t.wait();
  EXPECT_EQ(t.device(), "remote:" + server.address());
  // A second product on the replicas already there, then the result comes back.
  rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(there), 1.0, 1.0, 0, 0,
            ferry::on(ferry::remote(server.address())));
  rt.submit("scal", ferry::readwrite(here), 2.0, ferry::on(ferry::cpu()));
  auto h1 = here.host();
  auto h2 = there.host();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) ASSERT_NEAR(h1(i, j), h2(i, j), 1e-9 * (1 + std::abs(h1(i, j)))) << i << "," << j;
  const auto stats = rt.remote_stats(server.address());
  EXPECT_EQ(stats.server_tasks, 2u);
  EXPECT_EQ(stats.bytes_shipped, 3 * n * n * sizeof(double)) << "a replica travelled twice";
}

// ferryd runs each built-in on its GPU: cuBLAS, cuSOLVER and the device math
// library round differently from the client's OpenBLAS and glibc, so the
// results agree to a relative 1e-10, not bit for bit.
TEST(FerrydGpu, EveryBuiltinKernelMatchesTheCpuWithinRounding) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  FerrydProcess server({"--gpus", "all"});
  ASSERT_TRUE(server.wait_for_log("GPUs: cuda:0", FerrydProcess::gpu_start_timeout)) << server.log();
  ferry::Runtime rt(client_options(server));
  ferry::test::expect_every_builtin_matches_the_cpu(rt, server.address(), 1e-10);
}

TEST(FerrydGpu, GpusNoneServesOnTheCpu) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  FerrydProcess server({"--gpus", "none"});
  ASSERT_TRUE(server.wait_for_log("0 GPUs")) << server.log();
  ferry::Runtime rt(client_options(server));
  auto x = rt.buffer<double>(1000);
  std::ranges::fill(x.host(), 1.0);
  EXPECT_EQ(rt.submit("sum", ferry::read(x), ferry::on(ferry::remote(server.address()))).result(), 1000.0);
}

}  // namespace
