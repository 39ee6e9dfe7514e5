// Which GPUs get a CUDA context. A primary context costs about half a GiB of
// GPU memory, so a runtime must make one only on the GPUs it was told to
// use, and a thread that calls into a GPU must leave as it came (no context
// bound where it had none). Every test needs a GPU (ctest label gpu) and
// skips visibly without one; the two-GPU test says "needs 2 GPUs".
//
// Primary contexts live until the process ends, so nothing else in this
// binary may touch GPU 0: the tests below use it only where they expect a
// context, and check GPU 0 before they do.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

#if FERRY_WITH_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#endif

namespace {

using ferry::Runtime;

Runtime::Options options(std::string gpus) {
  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = std::move(gpus);
  return o;
}

// A few CPU tasks: the runtime must not need CUDA for them.
void run_cpu_tasks(Runtime& rt) {
  auto x = rt.buffer<double>(4096);
  rt.submit("fill", ferry::write(x), 2.0, ferry::on(ferry::cpu()));
  rt.submit("scal", ferry::readwrite(x), 3.0, ferry::on(ferry::cpu()));
  rt.wait();
  EXPECT_EQ(x.host()[0], 6.0);
}

#if FERRY_WITH_CUDA

// The driver calls the checks need, through cudart as the module finds them
// (the test links no libcuda, so that it starts, and skips, without a driver).
template <typename Fn>
Fn driver_call(const char* symbol, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    throw std::runtime_error(std::string("the driver has no ") + symbol);
  return reinterpret_cast<Fn>(fn);
}

// Whether GPU `ordinal`'s primary context is active (retained by anyone in this process).
bool primary_context_active(int ordinal) {
  static const auto device_get = driver_call<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
  static const auto state = driver_call<PFN_cuDevicePrimaryCtxGetState_v7000>("cuDevicePrimaryCtxGetState", 7000);
  CUdevice device = 0;
  if (device_get(&device, ordinal) != CUDA_SUCCESS) throw std::runtime_error("cuDeviceGet failed");
  unsigned flags = 0;
  int active = 0;
  if (state(device, &flags, &active) != CUDA_SUCCESS) throw std::runtime_error("cuDevicePrimaryCtxGetState failed");
  return active != 0;
}

// Whether the calling thread has a context bound.
bool context_current() {
  static const auto get = driver_call<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
  CUcontext context = nullptr;
  return get(&context) == CUDA_SUCCESS && context != nullptr;
}

// No GPU at all is the plain reason (a GPU machine that sees none must
// fail the kit); too few says "needs N GPUs" (not applicable there).
#define REQUIRE_GPUS(n)                                                                             \
  do {                                                                                              \
    const int count = ferry::cuda::device_count();                                                  \
    if (count == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();                              \
    if (count < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs (this machine has " << count << ")"; \
  } while (0)

// gpus = "none": constructing the runtime and running CPU tasks makes no
// context anywhere (it never even loads the CUDA module).
TEST(CudaContext, ARuntimeWithoutGpusMakesNoContext) {
  REQUIRE_GPUS(1);
  ASSERT_FALSE(primary_context_active(0)) << "something before this test made GPU 0's context";
  {
    Runtime rt(options("none"));
    run_cpu_tasks(rt);
    EXPECT_FALSE(primary_context_active(0));
  }
  EXPECT_FALSE(primary_context_active(0));
  EXPECT_FALSE(context_current());
}

// FERRY_GPUS=1 on a two-GPU machine: GPU 1 does the work, and GPU 0, not
// selected, gets no context, for the device, its pools, the pinned host
// pool's slabs or any thread that called in.
TEST(CudaContext, OnlyTheSelectedGpuGetsAContext) {
  REQUIRE_GPUS(2);
  ASSERT_FALSE(primary_context_active(0)) << "something before this test made GPU 0's context";
  {
    Runtime rt(options("1"));
    run_cpu_tasks(rt);
    auto x = rt.buffer<double>(1 << 20);  // 8 MiB: pinned slabs of their own, copies both ways
    rt.submit("fill", ferry::write(x), 1.0, ferry::on(ferry::cpu()));
    const ferry::Task task = rt.submit("scal", ferry::readwrite(x), 5.0, ferry::on(ferry::gpu(1)));
    task.wait();
    EXPECT_EQ(task.device(), "cuda:1");
    EXPECT_EQ(x.host()[0], 5.0);  // read back on this thread
    EXPECT_TRUE(primary_context_active(1));
    EXPECT_FALSE(primary_context_active(0)) << "GPU 0 got a context though only GPU 1 was selected";
  }
  EXPECT_FALSE(primary_context_active(0)) << "GPU 0 got a context at shutdown";
}

// A thread that had no context has none after the runtime used a GPU from
// it: construction, a task, reading the result back and shutdown all run
// here. (The guard used to "restore" device 0, binding its context.)
TEST(CudaContext, AThreadIsLeftWithTheContextItHad) {
  REQUIRE_GPUS(1);
  std::string failure;
  std::thread([&] {
    try {
      if (context_current()) throw std::runtime_error("a fresh thread has a context");
      {
        Runtime rt(options("0"));
        if (context_current()) throw std::runtime_error("constructing the runtime left a context bound");
        auto x = rt.buffer<double>(1 << 16);
        rt.submit("fill", ferry::write(x), 1.0, ferry::on(ferry::cpu()));
        rt.submit("scal", ferry::readwrite(x), 4.0, ferry::on(ferry::gpu(0))).wait();
        if (x.host()[0] != 4.0) throw std::runtime_error("wrong result");
        if (context_current()) throw std::runtime_error("running a task and reading back left a context bound");
      }
      if (context_current()) throw std::runtime_error("shutting the runtime down left a context bound");
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }).join();
  EXPECT_EQ(failure, "");
}

#else

TEST(CudaContext, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA (FERRY_WITH_CUDA=OFF)"; }

#endif

}  // namespace
