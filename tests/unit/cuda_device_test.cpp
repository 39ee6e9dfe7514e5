// The local GPU as a device: built-in kernels against the CPU, copies of
// tiles, eviction under a small memory cap, unified buffers, a mixed
// CPU/GPU tiled Cholesky, failures. Every test needs a GPU and skips
// visibly without one (ctest label gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../../samples/cholesky/tiled_cholesky.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "../support/builtin_conformance.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using ferry::Runtime;

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason(); \
  } while (0)

Runtime::Options gpu_options(std::size_t memory_limit = 0) {
  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "0";
  o.gpu_memory_limit = memory_limit;
  return o;
}

bool has_cuda_variant(const char* kernel) {
  const ferry::KernelDef* def = ferry::KernelRegistry::global().find(kernel);
  return def != nullptr && static_cast<bool>(def->cuda);
}

const ferry::DeviceInfo& gpu_info(const std::vector<ferry::DeviceInfo>& devices) {
  for (const auto& d : devices)
    if (d.name == "cuda:0") return d;
  throw std::logic_error("no cuda:0");
}

using ferry::test::contents;
using ferry::test::fill_random;

// Kernels written with the runtime API alone, so that the device's own
// paths are tested whatever built-in CUDA variants exist.
ferry::KernelDef cuda_only(std::string name, ferry::AccessMode mode, ferry::KernelFn fn) {
  ferry::KernelDef k;
  k.name = std::move(name);
  k.params.push_back(ferry::Param{"x", ferry::ParamKind::buffer, mode, {ferry::DType::f64}, std::nullopt});
  k.cuda = std::move(fn);
  return k;
}

void add_one_on_host(ferry::ExecContext& ctx) {
  const ferry::BufferArg& x = ctx.args.buffer(0);
  for (std::size_t i = 0; i < x.rows; ++i)
    for (std::size_t j = 0; j < x.cols; ++j) x.as<double>()[i * x.ld + j] += 1.0;
}

#if FERRY_WITH_CUDA
// Adds 1 to every element of an f64 view through the host: a kernel of its
// own would need nvcc here, and a memset would not prove the data arrived.
void add_one(ferry::ExecContext& ctx) {
  const ferry::BufferArg& x = ctx.args.buffer(0);
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ctx.device) throw std::runtime_error("wrong device current");
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  std::vector<double> h(x.rows * x.cols);
  const std::size_t row = x.cols * sizeof(double);
  if (cudaMemcpy2DAsync(h.data(), row, x.data, x.ld * sizeof(double), row, x.rows, cudaMemcpyDefault, stream) !=
      cudaSuccess)
    throw std::runtime_error("copy out failed");
  if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("sync failed");
  for (double& v : h) v += 1.0;
  if (cudaMemcpy2DAsync(x.data, x.ld * sizeof(double), h.data(), row, row, x.rows, cudaMemcpyDefault, stream) !=
      cudaSuccess)
    throw std::runtime_error("copy in failed");
  if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("sync failed");
}
#else
void add_one(ferry::ExecContext&) { throw std::runtime_error("built without CUDA"); }
#endif

// add_one with a CPU variant too, so the scheduler may put it either way.
ferry::KernelDef add_one_kernel() {
  ferry::KernelDef k = cuda_only("add_one", ferry::AccessMode::readwrite, add_one);
  k.cpu = add_one_on_host;
  return k;
}


// A new GPU starts from its measured peak (a timed SGEMM and device copy),
// so its first placement weighs real rates: the estimate says "probe".
TEST(CudaDevice, ANewGpuStartsFromItsMeasuredPeak) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  const auto devices = rt.devices();
  const ferry::DeviceInfo& gpu = gpu_info(devices);
  EXPECT_TRUE(gpu.peak.measured) << "the GPU probe did not run (its warning says why)";
  EXPECT_GT(gpu.peak.flops_per_second, 1e11);
  EXPECT_GT(gpu.peak.bytes_per_second, 1e10);
  auto a = rt.buffer<float>(1024, 1024), b = rt.buffer<float>(1024, 1024), c = rt.buffer<float>(1024, 1024);
  const std::string why = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c)).explain();
  rt.wait();
  EXPECT_NE(why.find("(probe, 0)"), std::string::npos) << why;
}

TEST(CudaDevice, IsListedAndDescribed) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  const auto devices = rt.devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].kind, ferry::DeviceKind::cuda);
  EXPECT_EQ(devices[1].name, "cuda:0");
  EXPECT_NE(rt.describe().find("cuda:0"), std::string::npos) << rt.describe();
}

TEST(CudaDevice, OwnVariantSeesItsDataAndWritesItBack) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  auto k = rt.add_kernel(cuda_only("add_one", ferry::AccessMode::readwrite, add_one));
  auto m = rt.buffer<double>(64, 48);
  fill_random(m, 1);
  const auto before = contents(m);
  // Whole, then a tile (strided on the host, packed on the GPU), then a row split.
  rt.submit(k, ferry::readwrite(m), ferry::on(ferry::gpu(0))).wait();
  auto tile = m.tiles(16, 16)(1, 2);  // rows 16-31, cols 32-47
  EXPECT_EQ(rt.submit(k, ferry::readwrite(tile), ferry::on(ferry::gpu(0))).device(), "cuda:0");
  auto h = m.host();
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 48; ++j) {
      const bool in_tile = i >= 16 && i < 32 && j >= 32;
      ASSERT_EQ(h(i, j), before[i * 48 + j] + (in_tile ? 2.0 : 1.0)) << i << "," << j;
    }
  const auto devices_now = rt.devices();  // gpu_info returns a reference into it
  const auto& gpu = gpu_info(devices_now);
  EXPECT_GT(gpu.bytes_in, 0u);
  EXPECT_GT(gpu.bytes_out, 0u);
}

TEST(CudaDevice, ThrowingVariantIsAKernelErrorNamingTheGpu) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  auto k = rt.add_kernel(
      cuda_only("throws", ferry::AccessMode::readwrite, [](ferry::ExecContext&) { throw std::runtime_error("boom"); }));
  auto x = rt.buffer<double>(16);
  std::ranges::fill(x.host(), 3.0);
  try {
    rt.submit(k, ferry::readwrite(x), ferry::on(ferry::gpu(0))).wait();
    FAIL() << "expected KernelError";
  } catch (const ferry::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.wait(), ferry::KernelError);
  EXPECT_NO_THROW(rt.wait());
}

TEST(CudaDevice, InvalidOrdinalNamesItAndTheCount) {
  REQUIRE_GPU();
  auto o = gpu_options();
  o.gpus = std::to_string(ferry::cuda::device_count());
  try {
    Runtime rt(o);
    FAIL() << "expected UsageError";
  } catch (const ferry::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no GPU " + o.gpus), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(ferry::cuda::device_count()) + " GPU"), std::string::npos) << what;
  }
}

// The device conformance suite (tests/support/builtin_conformance.hpp) on
// the GPU: each built-in does what it says, and agrees with the CPU device
// to a relative 1e-9 (cuBLAS, cuSOLVER and the device math library round
// differently from OpenBLAS and glibc).
TEST(CudaDevice, EveryBuiltinKernelConforms) {
  REQUIRE_GPU();
  for (const char* kernel : ferry::test::conformance_kernels)
    EXPECT_TRUE(has_cuda_variant(kernel)) << kernel << ": every built-in has a CUDA variant";
  Runtime rt(gpu_options());
  EXPECT_EQ(ferry::test::expect_every_builtin_conforms(rt, {ferry::on(ferry::gpu(0)), "cuda:0", 1e-9}),
            ferry::test::builtins_checked);
}

// Each task of a chain on one GPU is enqueued behind its predecessor on its
// stream, before that one finished, not after a completion round each.
TEST(CudaDevice, ADependentChainIsOrderedOnTheGpuStream) {
  REQUIRE_GPU();
  auto o = gpu_options();
  // Whole tasks: a task split into pieces is a join, which waits for its
  // pieces' completion (its pieces are ordered among themselves only).
  o.auto_chunk = false;
  Runtime rt(o);
  const auto gpu = ferry::on(ferry::gpu(0));
  // 64 MiB each: an axpy takes tens of microseconds, more than a submit, so
  // the tasks are submitted while their predecessors still run.
  const std::size_t n = std::size_t{1} << 23;
  const int chain = 200;
  auto x = rt.buffer<double>(n), y = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  std::ranges::fill(y.host(), 0.0);
  for (int i = 0; i < chain; ++i) rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, gpu);
  rt.wait();
  const auto devices_now = rt.devices();  // gpu_info returns a reference into it
  const auto& info = gpu_info(devices_now);
  EXPECT_GT(info.stream_ordered, static_cast<std::size_t>(chain / 2))
      << "tasks of the chain waited for their predecessor's completion instead of following it on its stream";
  // Ordered or not, every step happened, in order, on the data the last left.
  const auto h = y.host();
  for (std::size_t i = 0; i < n; i += 4093) ASSERT_EQ(h[i], static_cast<double>(chain)) << "at " << i;
  ASSERT_EQ(h[n - 1], static_cast<double>(chain));
}

// A successor touching part of what its predecessor writes (a tile of it)
// is not ordered on the stream: it waits for the completion, which settles
// the data first; the results match the CPU's.
TEST(CudaDevice, ATileOfAnInFlightOutputWaitsForItsCompletion) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  const auto gpu = ferry::on(ferry::gpu(0));
  auto m = rt.buffer<double>(512, 512);
  std::ranges::fill(m.host(), 1.0);
  auto t = m.tiles(256, 256);
  for (int round = 0; round < 20; ++round) {
    rt.submit("scal", ferry::readwrite(m), 2.0, gpu);
    rt.submit("scal", ferry::readwrite(t(1, 1)), 0.5, gpu);
  }
  rt.wait();
  const auto h = m.host();
  EXPECT_EQ(h(0, 0), std::pow(2.0, 20));
  EXPECT_EQ(h(300, 300), 1.0);
  EXPECT_EQ(h(100, 400), std::pow(2.0, 20));
}

// What one GPU wrote moves to another in one copy between them (peer to
// peer where the pair allows), never through the host.
TEST(CudaDevice, AMoveBetweenTwoGpusIsOneCopyBetweenThem) {
  REQUIRE_GPU();
  const int count = ferry::cuda::device_count();
  if (count < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << count << ")";
  auto o = gpu_options();
  o.gpus = "0,1";
  o.auto_chunk = false;  // one buffer, one copy
  Runtime rt(o);
  const std::size_t n = std::size_t{1} << 20;
  auto x = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  EXPECT_EQ(rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::gpu(0))).device(), "cuda:0");
  EXPECT_EQ(rt.submit("scal", ferry::readwrite(x), 3.0, ferry::on(ferry::gpu(1))).device(), "cuda:1");
  rt.wait();
  const auto devices = rt.devices();
  const auto find = [&](const char* name) -> const ferry::DeviceInfo& {
    for (const auto& d : devices)
      if (d.name == name) return d;
    throw std::logic_error(std::string("no ") + name);
  };
  EXPECT_EQ(find("cuda:0").bytes_out, 0u) << "the data went from GPU 0 through the host";
  EXPECT_EQ(find("cuda:1").bytes_in, 0u) << "GPU 1 got the data from host memory";
  EXPECT_EQ(find("cuda:1").bytes_from_peers, n * sizeof(double));
  const auto h = x.host();
  EXPECT_EQ(h[0], 6.0);
  EXPECT_EQ(h[n - 1], 6.0);
}

TEST(CudaDevice, EvictionUnderASmallCapWritesModifiedReplicasBack) {
  REQUIRE_GPU();
  // Room for 8 replicas of 1 MiB; 24 buffers, each modified on the GPU, twice.
  Runtime rt(gpu_options(std::size_t{8} << 20));
  auto k = rt.add_kernel(cuda_only("add_one", ferry::AccessMode::readwrite, add_one));
  std::vector<ferry::Buffer<double>> xs;
  for (int i = 0; i < 24; ++i) {
    xs.push_back(rt.buffer<double>(1 << 17));
    std::ranges::fill(xs.back().host(), static_cast<double>(i));
  }
  for (int round = 0; round < 2; ++round)
    for (auto& x : xs) EXPECT_EQ(rt.submit(k, ferry::readwrite(x), ferry::on(ferry::gpu(0))).device(), "cuda:0");
  rt.wait();
  // Before any host() call: only evictions can have copied data back.
  EXPECT_GE(gpu_info(rt.devices()).bytes_out, std::size_t{16} << 20) << "modified replicas were not written back";
  for (int i = 0; i < 24; ++i) {
    auto h = xs[static_cast<std::size_t>(i)].host();
    EXPECT_EQ(h[0], i + 2.0) << i;
    EXPECT_EQ(h[(1 << 17) - 1], i + 2.0) << i;
  }
}

TEST(CudaDevice, TooLargeForTheCapRunsOnTheCpuOrFailsClearly) {
  REQUIRE_GPU();
  Runtime rt(gpu_options(std::size_t{1} << 20));
  auto both = rt.add_kernel(add_one_kernel());
  auto x = rt.buffer<double>(1 << 18);  // 2 MiB: more than the cap
  std::ranges::fill(x.host(), 1.0);
  auto t = rt.submit(both, ferry::readwrite(x), ferry::on(ferry::gpu(0)));
  t.wait();
  EXPECT_EQ(t.device(), "cpu");
  EXPECT_EQ(x.host()[(1 << 18) - 1], 2.0);
  // Without a CPU variant there is nowhere else to go: a clear failure, not a wrong result.
  auto only = rt.add_kernel(cuda_only("add_one_gpu", ferry::AccessMode::readwrite, add_one));
  try {
    rt.submit(only, ferry::readwrite(x), ferry::on(ferry::gpu(0))).wait();
    FAIL() << "expected KernelError";
  } catch (const ferry::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.wait(), ferry::KernelError);
}

TEST(CudaDevice, UnifiedBufferIsUsedInPlaceWithoutCopies) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  auto k = rt.add_kernel(add_one_kernel());
  const auto gpu = ferry::on(ferry::gpu(0));
  const std::size_t n = std::size_t{1} << 20;
  auto x = rt.unified<double>(n);
  std::ranges::fill(x.host(), 2.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rt.submit(k, ferry::readwrite(x), gpu).device(), "cuda:0");
  {
    // Scoped: a host view held open would make the `scal` below wait for it.
    auto h = x.host();  // prefetched back from the GPU
    EXPECT_EQ(h[0], 5.0);
    EXPECT_EQ(h[n - 1], 5.0);
  }
  // Host and GPU take turns on tiles of one unified matrix.
  auto m = rt.unified<double>(256, 256);
  std::ranges::fill(m.host(), 1.0);
  auto t = m.tiles(128, 128);
  rt.submit(k, ferry::readwrite(t(0, 0)), gpu);
  rt.submit(k, ferry::readwrite(t(1, 1)), ferry::on(ferry::cpu()));
  rt.submit(k, ferry::readwrite(t(1, 1)), gpu);
  {
    auto hm = m.host();
    EXPECT_EQ(hm(0, 0), 2.0);
    EXPECT_EQ(hm(200, 200), 3.0);
    EXPECT_EQ(hm(0, 200), 1.0);
  }
  rt.submit("scal", ferry::readwrite(x), 2.0, gpu);
  EXPECT_EQ(x.host()[n - 1], 10.0);
  const auto devices_now = rt.devices();  // gpu_info returns a reference into it
  const auto& info = gpu_info(devices_now);
  EXPECT_EQ(info.bytes_in, 0u) << "a unified buffer was copied";
  EXPECT_EQ(info.bytes_out, 0u) << "a unified buffer was copied";
}

TEST(CudaDevice, MixedCpuGpuTiledCholesky) {
  REQUIRE_GPU();
  auto o = gpu_options();
  o.policy = ferry::Policy::random;  // both devices, in no particular pattern
  o.seed = 7;
  Runtime rt(o);
  const std::size_t n = 1024, nb = 128;
  auto a = rt.buffer<double>(n, n);
  const std::vector<double> original = ferry::samples::fill_spd(a, 3);
  ferry::samples::submit_tiled_cholesky(rt, a.tiles(nb, nb));
  rt.wait();
  std::size_t on_cpu = 0, on_gpu = 0;
  for (const auto& d : rt.devices()) (d.kind == ferry::DeviceKind::cpu ? on_cpu : on_gpu) += d.tasks_run;
  EXPECT_GT(on_cpu, 0u);
  EXPECT_GT(on_gpu, 0u);
  // ||A - L L^T||_F / ||A||_F over the lower triangle.
  auto l = a.host();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      double s = 0;
      for (std::size_t k = 0; k <= j; ++k) s += l(i, k) * l(j, k);
      diff += (s - original[i * n + j]) * (s - original[i * n + j]);
      norm += original[i * n + j] * original[i * n + j];
    }
  EXPECT_LT(std::sqrt(diff / norm), 1e-12);
}

}  // namespace

namespace ferry {
namespace {

#if FERRY_WITH_CUDA
// A variant that leaves a CUDA error unchecked fails its own task, naming the
// error; the next task on the GPU is not charged with it and runs.
TEST(CudaDevice, AnUncheckedErrorFailsItsOwnTaskOnly) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  auto careless = rt.add_kernel(cuda_only("careless", AccessMode::readwrite, [](ExecContext&) {
    (void)cudaSetDevice(-1);  // cudaErrorInvalidDevice, left for someone else to find
  }));
  auto x = rt.buffer<double>(64);
  std::ranges::fill(x.host(), 1.0);
  try {
    rt.submit(careless, readwrite(x), on(gpu(0))).wait();
    FAIL() << "expected KernelError";
  } catch (const KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("careless"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidDevice"), std::string::npos) << what;
  }
  EXPECT_THROW(rt.wait(), KernelError);
  auto y = rt.buffer<double>(64);
  std::ranges::fill(y.host(), 2.0);
  auto next = rt.submit("scal", readwrite(y), 3.0, on(gpu(0)));
  EXPECT_NO_THROW(next.wait());
  EXPECT_EQ(next.device(), "cuda:0");
  EXPECT_EQ(y.host()[63], 6.0);
  EXPECT_EQ(rt.submit("sum", read(y), on(gpu(0))).result(), 6.0 * 64) << "the reduction's launch is its own";
}

// Device data still being written on the legacy default stream when it is
// imported (as a DLPack producer leaves it when asked with stream=1): the
// copy on Ferry's own non-blocking stream must wait for that work.
TEST(CudaDevice, ImportWaitsForWorkOnTheLegacyDefaultStream) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  const std::size_t n = std::size_t{1} << 26;  // 256 MiB of floats
  auto x = rt.buffer<float>(n);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(float)), cudaSuccess);
  // Milliseconds of queued work, the last of it writing every byte 0x3f:
  // an unordered copy would catch zeros.
  for (int i = 0; i < 40; ++i)
    ASSERT_EQ(cudaMemsetAsync(device, 0, n * sizeof(float), cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 0x3f, n * sizeof(float), cudaStreamLegacy), cudaSuccess);
  rt.import_device_data(x, 0, device);
  const unsigned char pattern[4] = {0x3f, 0x3f, 0x3f, 0x3f};
  float expected = 0;
  std::memcpy(&expected, pattern, sizeof expected);
  auto h = x.host();
  for (std::size_t i = 0; i < n; i += n / 64) ASSERT_EQ(h[i], expected) << i;
  ASSERT_EQ(h[n - 1], expected);
  cudaFree(device);
}

TEST(CudaDevice, ImportedDeviceDataStaysOnTheGpuUntilReadOnTheHost) {
  REQUIRE_GPU();
  Runtime rt(gpu_options());
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), values.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  auto x = rt.buffer<float>(values.size());
  rt.import_device_data(x, 0, device);
  const auto in_before = gpu_info(rt.devices()).bytes_in;
  // A GPU task uses the imported replica: nothing is shipped for it.
  rt.submit("scal", readwrite(x), 2.0, on(gpu(0))).wait();
  EXPECT_EQ(gpu_info(rt.devices()).bytes_in, in_before);
  auto h = x.host();  // now it crosses, once
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(h[i], 2.0f * values[i]) << i;
  cudaFree(device);
}
#endif

}  // namespace
}  // namespace ferry
