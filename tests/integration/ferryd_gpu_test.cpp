// ferryd serving a remote client with its GPUs (--gpus all): the client's
// task runs on ferryd's CUDA device, its data staged through ferryd's host
// replica, its results kept on the GPU until the client reads them. Needs a
// GPU on this host (ctest label gpu); skips visibly without.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <random>
#include <string>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "../support/builtin_conformance.hpp"
#include "ferryd_process.hpp"
#include "test_client.hpp"
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
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
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
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
  ferry::Runtime rt(client_options(server));
  EXPECT_EQ(ferry::test::expect_every_builtin_conforms(
                rt, {ferry::on(ferry::remote(server.address())), "remote:" + server.address(), 1e-10}),
            ferry::test::builtins_checked);
}

// A chain of GPU runs on one replica: what each run writes stays on the
// GPU (ferryd's GPU copies nothing home per run), the first get brings it
// home once, and a put into it afterwards neither leaves the GPU a stale
// copy nor loses what only the GPU held. Raw protocol, so the test decides
// exactly which request ferryd sees when.
TEST(FerrydGpu, ResultsStayOnTheGpuUntilAGetReadsThem) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  namespace proto = ferry::protocol;
  using ferry::test::TestClient;
  FerrydProcess server({"--gpus", "all", "--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
  const std::uint16_t metrics = ferry::test::metrics_port(server);
  TestClient client{server.port()};
  const proto::Welcome welcome = client.authenticate(FerrydProcess::default_token);
  const auto copied = [&](const char* direction) {
    const auto value = ferry::test::metric_value(
        ferry::test::scrape_metrics(metrics),
        std::string("ferry_device_copy_bytes{device=\"cuda:0\",direction=\"") + direction + "\"}");
    if (!value) ADD_FAILURE() << "no ferry_device_copy_bytes series for cuda:0 " << direction;
    return static_cast<std::uint64_t>(value.value_or(-1));
  };

  // Integers and halves: every sum below is exact in double, on any GPU.
  constexpr std::size_t n = std::size_t{1} << 16;
  constexpr std::uint64_t bytes = n * sizeof(double);
  std::vector<double> x(n), y(n, 1.0);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<double>(i);
  client.put_all(1, proto::DType::f64, 1, n, x.data(), bytes, welcome.max_payload);
  client.put_all(2, proto::DType::f64, 1, n, y.data(), bytes, welcome.max_payload);
  const auto axpy = [&] {
    const proto::Done done = client.run(
        "axpy", {TestClient::buffer(1, proto::Mode::read), TestClient::buffer(2, proto::Mode::readwrite),
                 TestClient::real(2.0)});
    ASSERT_EQ(done.status, proto::Status::ok) << done.message << "\n" << server.log();
  };
  const auto get_y = [&] {
    const std::vector<std::byte> got = client.get(2, 0, bytes);
    std::vector<double> out(n);
    std::memcpy(out.data(), got.data(), bytes);
    return out;
  };

  const std::uint64_t home_before = copied("from_device");
  constexpr int chain = 8;
  for (int k = 0; k < chain; ++k) {
    axpy();
    // Every run done (its Done came), and still nothing came home.
    EXPECT_EQ(copied("from_device"), home_before) << "run " << k + 1 << " copied its result home";
  }
  EXPECT_GE(copied("to_device"), 2 * bytes) << "the runs did not run on the GPU";

  // (a) The get brings the chain's result home, once.
  std::vector<double> out = get_y();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 1.0 + 2.0 * chain * x[i]) << i;
  EXPECT_EQ(copied("from_device"), home_before + bytes);
  out = get_y();  // the host has it now: no second copy
  EXPECT_EQ(out[n - 1], 1.0 + 2.0 * chain * x[n - 1]);
  EXPECT_EQ(copied("from_device"), home_before + bytes);

  // One more run leaves the newest y only on the GPU; a put into the first
  // half of it must keep the second half the GPU wrote, and the run after
  // must read the put's bytes, not the GPU's old copy.
  axpy();
  const std::vector<double> minus_one(n / 2, -1.0);
  ASSERT_EQ(client.put(2, proto::DType::f64, 1, n, minus_one.data(), bytes / 2, 0).status, proto::Status::ok);
  axpy();
  out = get_y();
  for (std::size_t i = 0; i < n / 2; ++i) ASSERT_EQ(out[i], -1.0 + 2.0 * x[i]) << i;
  for (std::size_t i = n / 2; i < n; ++i) ASSERT_EQ(out[i], 1.0 + 2.0 * (chain + 2) * x[i]) << i;
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
  ASSERT_TRUE(server.wait_for_gpu(0)) << server.log();
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
