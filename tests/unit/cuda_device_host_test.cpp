// What of the local-GPU support is checkable on any machine: choosing GPUs
// (Options::gpus, FERRY_GPUS, FERRY_GPU_MEMORY), a runtime without usable
// GPUs, unified buffers as host buffers, and placement decisions with a
// GPU among the candidates.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"
#include "runtime_test_support.hpp"

namespace ferry {
namespace {

Runtime::Options options(std::string gpus = "none") {
  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = std::move(gpus);
  return o;
}

std::size_t cuda_devices(const Runtime& rt) {
  std::size_t n = 0;
  for (const auto& d : rt.devices()) n += d.kind == DeviceKind::cuda;
  return n;
}

using testing::ScopedEnv;

std::string usage_error_of(const Runtime::Options& o) {
  try {
    Runtime rt(o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

TEST(GpuSelection, NoneMeansNoCudaDeviceAndEverythingRuns) {
  Runtime rt(options("none"));
  EXPECT_EQ(cuda_devices(rt), 0u);
  auto x = rt.buffer<double>(64);
  rt.submit("fill", write(x), 2.0);
  EXPECT_EQ(rt.submit("sum", read(x)).result(), 128.0);
}

TEST(GpuSelection, AllMeansEveryGpuThereIs) {
  // Here (no driver, or a build without CUDA) that is none; on a GPU host, all of them.
  Runtime rt(options("all"));
  EXPECT_EQ(cuda_devices(rt), static_cast<std::size_t>(cuda::device_count()));
  auto x = rt.buffer<float>(16);
  rt.submit("fill", write(x), 1.5);
  EXPECT_EQ(x.host()[15], 1.5f);
}

TEST(GpuSelection, EnvironmentOverridesTheOptions) {
  auto o = options("all");
  o.read_environment = true;
  ScopedEnv gpus("FERRY_GPUS", "none");
  Runtime rt(o);
  EXPECT_EQ(cuda_devices(rt), 0u);
  EXPECT_EQ(rt.options().gpus, "none");
}

TEST(GpuSelection, GarbageIsAUsageErrorEverywhere) {
  auto o = options("all");
  o.read_environment = true;
  ScopedEnv gpus("FERRY_GPUS", "banana");
  const std::string what = usage_error_of(o);
  EXPECT_NE(what.find("banana"), std::string::npos) << what;
  EXPECT_NE(what.find("all, none or ordinals"), std::string::npos) << what;
}

TEST(GpuSelection, AnOrdinalThisHostLacksIsNamedWithTheCount) {
  const int count = cuda::device_count();
  const std::string what = usage_error_of(options(std::to_string(count + 3)));
  EXPECT_NE(what.find("no GPU " + std::to_string(count + 3)), std::string::npos) << what;
  if (count == 0)
    EXPECT_NE(what.find(cuda::unavailable_reason()), std::string::npos) << what;
  else
    EXPECT_NE(what.find(std::to_string(count) + " GPU"), std::string::npos) << what;
}

TEST(GpuSelection, AnOrdinalListedTwiceIsAUsageError) {
  const std::string what = usage_error_of(options("0, 0"));
  EXPECT_NE(what.find("listed twice"), std::string::npos) << what;
}

TEST(GpuSelection, MemoryAndStreamSettingsAreChecked) {
  auto o = options("none");
  o.read_environment = true;
  {
    ScopedEnv memory("FERRY_GPU_MEMORY", "lots");
    EXPECT_NE(usage_error_of(o).find("lots"), std::string::npos);
  }
  {
    ScopedEnv streams("FERRY_GPU_STREAMS", "0");
    EXPECT_NE(usage_error_of(o).find("FERRY_GPU_STREAMS"), std::string::npos);
  }
  ScopedEnv memory("FERRY_GPU_MEMORY", "512MiB");
  ScopedEnv streams("FERRY_GPU_STREAMS", "3");
  Runtime rt(o);
  EXPECT_EQ(rt.options().gpu_memory_limit, std::size_t{512} << 20);
  EXPECT_EQ(rt.options().gpu_streams, 3u);
}

TEST(UnifiedBuffers, WithoutAGpuTheyAreHostBuffers) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this host has a GPU: tests/unit/cuda_device_test.cpp covers it";
  Runtime rt(options("all"));
  auto x = rt.unified<double>(1000);
  auto y = rt.unified<double>(1000);
  std::ranges::fill(x.host(), 1.0);
  rt.submit("axpy", read(x), readwrite(y), 2.0);
  rt.submit("scal", readwrite(y), 3.0);
  EXPECT_EQ(y.host()[999], 6.0);

  auto m = rt.unified<float>(64, 32);
  auto tiles = m.tiles(32, 16);
  rt.submit("fill", write(tiles(1, 1)), 4.0);
  auto h = m.host();
  EXPECT_EQ(h(40, 20), 4.0f);
  EXPECT_EQ(h(0, 0), 0.0f);  // zeroed like any buffer

  AnyBuffer any = rt.unified(DType::i32, 4, 4);
  EXPECT_EQ(any.dtype(), DType::i32);
  EXPECT_EQ(static_cast<const std::int32_t*>(any.host_data())[15], 0);
  EXPECT_EQ(cuda_devices(rt), 0u);
}

// decide() with a local GPU among the candidates: the same rules as for any
// device, plus the gpu policy and a GPU-only kernel.
struct GpuDecisions : ::testing::Test {
  PerfModels models;
  LinkModels links;
  DecisionInput input;

  static DeviceSnapshot device(DeviceId id, std::string name, DeviceKind kind, MemoryNodeId node, std::string key) {
    DeviceSnapshot d;
    d.id = id;
    d.name = std::move(name);
    d.kind = kind;
    d.node = node;
    d.perf_key = std::move(key);
    return d;
  }
  void SetUp() override {
    input.kernel = "gemm";
    input.models = &models;
    input.links = &links;
    input.devices = {device(0, "cpu", DeviceKind::cpu, host_node, "cpu"),
                     device(1, "cuda:0", DeviceKind::cuda, 1, "cuda:NVIDIA H100 80GB HBM3")};
    links.set(host_node, 1, Link{10e-6, 25e9});
    links.set(1, host_node, Link{10e-6, 25e9});
  }
  void calibrate(const std::string& key, std::size_t bytes, double seconds) {
    for (int i = 0; i < 3; ++i) models.record("gemm", key, bytes, seconds);
  }
};

TEST_F(GpuDecisions, FasterGpuWinsWhenTheCopyIsWorthIt) {
  const std::size_t bytes = std::size_t{96} << 20;
  calibrate("cpu", bytes, 2.0);
  calibrate("cuda:NVIDIA H100 80GB HBM3", bytes, 0.01);
  input.bytes = bytes;
  input.inputs = {InputSnapshot{bytes, {host_node}}};
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_NEAR(d.candidates[1].data_ready, 10e-6 + static_cast<double>(bytes) / 25e9, 1e-9);
}

TEST_F(GpuDecisions, SmallCallStaysOnTheCpuWhenTheCopyCostsMore) {
  const std::size_t bytes = std::size_t{64} << 10;
  calibrate("cpu", bytes, 1e-6);
  calibrate("cuda:NVIDIA H100 80GB HBM3", bytes, 0.5e-6);
  input.bytes = bytes;
  input.inputs = {InputSnapshot{bytes, {host_node}}};
  EXPECT_EQ(decide(input).device, 0u);
  // The same call with its input already on the GPU (or unified) goes there.
  input.inputs = {InputSnapshot{bytes, {host_node, 1}}};
  EXPECT_EQ(decide(input).device, 1u);
}

TEST_F(GpuDecisions, GpuPolicyAndGpuOnlyKernelsPickTheGpu) {
  calibrate("cpu", 1024, 1e-6);
  calibrate("cuda:NVIDIA H100 80GB HBM3", 1024, 1.0);
  input.bytes = 1024;
  input.policy = Policy::gpu;
  Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_FALSE(d.candidates[0].eligible);
  input.policy = Policy::heft;
  input.devices[0].can_run = false;  // a kernel with only a CUDA variant
  d = decide(input);
  EXPECT_EQ(d.device, 1u);
  EXPECT_EQ(d.reason, "only eligible device");
}

TEST_F(GpuDecisions, UncalibratedGpuIsExploredFromTheDevicePeak) {
  calibrate("cpu", 1 << 20, 1e-3);
  input.bytes = 1 << 20;
  input.devices[1].peak = DevicePeak{60e12, 3e12, 5e-6};
  input.hint = Cost{2e9, 1 << 20};
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_EQ(d.candidates[1].exec.source, Estimate::Source::hint);
  EXPECT_NE(d.reason.find("calibrating cuda:0"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(CudaDeviceHost, ImportDeviceDataNeedsAGpuAWholeBufferAndNoUsers) {
  Runtime rt(options("none"));
  auto x = rt.buffer<float>(16);
  try {
    rt.import_device_data(x, 0, nullptr);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU 0"), std::string::npos) << e.what();
  }
  auto parts = x.split(2);
  EXPECT_THROW(rt.import_device_data(parts[0], 0, nullptr), UsageError);
  auto slow = rt.kernel("slow", [](InOut<float>) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
  auto busy = rt.buffer<float>(4);
  rt.submit(slow, readwrite(busy));
  try {
    rt.import_device_data(busy, 0, nullptr);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tasks already use"), std::string::npos) << e.what();
  }
  rt.wait();
}

}  // namespace
}  // namespace ferry
