// ferryd serving a remote client with its GPUs (--gpus all): the client's
// task runs on ferryd's CUDA device, its data staged through ferryd's host
// replica. Needs a GPU on this host (ctest label gpu); skips visibly without.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "builtin_comparison.hpp"
#include "ferryd_process.hpp"
#include "metrics_port.hpp"

namespace {

using ferry::test::FerrydProcess;
using ferry::test::http_get;

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
  ASSERT_TRUE(server.wait_for_log("GPUs: cuda:0")) << server.log();
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
  ASSERT_TRUE(server.wait_for_log("GPUs: cuda:0")) << server.log();
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

// Writes through the address it is given: a client's bug that no check can
// catch before the kernel runs.
const char* const wild_write = R"(
extern "C" __global__ void wild_write(float* y, long long address) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<volatile float*>(address) = y[0];
}
)";

bool offers_a_gpu(const ferry::Runtime& rt, const std::string& address) {
  const auto devices = rt.remote_stats(address).server_devices;
  return std::any_of(devices.begin(), devices.end(), [](const std::string& d) { return d.starts_with("cuda:"); });
}

// A client's kernel that writes to the null page leaves ferryd's GPU with a
// sticky error (an illegal address: the context is unusable until the
// process restarts). The task fails naming the GPU and the error; ferryd
// logs the loss, offers the GPU to no new client, says so in its metric,
// and with no GPU left is neither ready nor live, so that Kubernetes
// restarts it. Its CPU workers still serve meanwhile.
TEST(FerrydGpu, AStickyErrorTakesTheGpuOutOfService) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  FerrydProcess server({"--gpus", "0", "--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(server.wait_for_log("GPUs: cuda:0")) << server.log();
  const auto port = ferry::test::metrics_port(server);
  ASSERT_NE(http_get(port, "/readyz").find("200 OK"), std::string::npos) << server.log();
  ASSERT_NE(http_get(port, "/metrics").find("ferry_device_up{device=\"cuda:0\"} 1"), std::string::npos);

  ferry::Runtime rt(client_options(server));
  ASSERT_TRUE(offers_a_gpu(rt, server.address())) << server.log();
  const auto k = rt.cuda_kernel(wild_write, "wild_write");
  auto y = rt.buffer<float>(32);
  std::ranges::fill(y.host(), 1.0f);
  try {
    rt.submit(k, ferry::readwrite(y), std::int64_t{16}, ferry::on(ferry::remote(server.address()))).wait();
    ADD_FAILURE() << "a write to address 16 succeeded";
  } catch (const ferry::KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_TRUE(what.find("cudaError") != std::string::npos || what.find("CUDA_ERROR") != std::string::npos)
        << "the CUDA error is not named: " << what;
  }

  EXPECT_TRUE(server.wait_for_log("GPU cuda:0 is down after a CUDA error")) << server.log();
  const std::string ready = http_get(port, "/readyz");
  EXPECT_NE(ready.find("503 Service Unavailable"), std::string::npos) << ready;
  EXPECT_NE(ready.find("cuda:0: "), std::string::npos) << "the reason does not name the GPU: " << ready;
  const std::string live = http_get(port, "/healthz");
  EXPECT_NE(live.find("503 Service Unavailable"), std::string::npos) << live;
  EXPECT_NE(http_get(port, "/metrics").find("ferry_device_up{device=\"cuda:0\"} 0"), std::string::npos);

  // The client that saw it: its next GPU task is refused, naming the GPU down
  // (on a fresh buffer: y is spoiled by the failed task).
  auto fresh = rt.buffer<float>(32);
  std::ranges::fill(fresh.host(), 1.0f);
  try {
    rt.submit(k, ferry::readwrite(fresh), std::int64_t{16}, ferry::on(ferry::remote(server.address()))).wait();
    ADD_FAILURE() << "a task ran on a GPU that is down";
  } catch (const ferry::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0: down"), std::string::npos) << e.what();
  }

  // A new client is offered no GPU, so CUDA source has nowhere to run; the CPU still serves it.
  ferry::Runtime late(client_options(server));
  ASSERT_TRUE(late.remote_stats(server.address()).connected) << server.log();
  EXPECT_FALSE(offers_a_gpu(late, server.address())) << server.log();
  const auto late_k = late.cuda_kernel(wild_write, "wild_write");
  auto z = late.buffer<float>(32);
  EXPECT_THROW(late.submit(late_k, ferry::readwrite(z), std::int64_t{16}), ferry::UsageError);
  auto x = late.buffer<double>(1000);
  std::ranges::fill(x.host(), 1.0);
  EXPECT_EQ(late.submit("sum", ferry::read(x), ferry::on(ferry::remote(server.address()))).result(), 1000.0)
      << server.log();
}

}  // namespace
