// CUDA source kernels running through a runtime on GPU 0: compiled by NVRTC
// for that GPU when defined, loaded, launched with the arguments packed as
// their C types.
// Skips where there is no GPU; a runtime that does not use the GPU CUDA sees fails.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>

#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/ferry.hpp"
#include "runtime_test_support.hpp"
#include "heavy_cuda_source.hpp"
#include "saxpy_cuda_source.hpp"

namespace ferry {
namespace {

// GPU 0: the test helpers' default is no GPU.
Runtime::Options gpu_options() {
  Runtime::Options o = testing::quiet_options(2);
  o.gpus = "0";
  return o;
}

class NvrtcGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << cuda::unavailable_reason();
    rt_ = std::make_unique<Runtime>(gpu_options());
    bool has_gpu = false;
    for (const auto& d : rt_->devices()) has_gpu = has_gpu || d.kind == DeviceKind::cuda;
    // A GPU is here: a runtime without it is a failure, not a reason to skip.
    if (!has_gpu) FAIL() << "CUDA sees a GPU, but this runtime has no CUDA device: " << rt_->describe();
  }
  std::unique_ptr<Runtime> rt_;
};

TEST_F(NvrtcGpu, SaxpyRunsOnGpuZero) {
  Runtime& rt = *rt_;
  const KernelRef saxpy = rt.cuda_kernel(testing::saxpy_cuda_source, "saxpy");
  const int n = 100003;  // not a multiple of the block
  auto x = rt.buffer<float>(n);
  auto y = rt.buffer<float>(n);
  testing::fill_saxpy_inputs(x, y, n);
  rt.submit(saxpy, n, 2.0f, read(x), readwrite(y), on(gpu(0)));
  rt.submit(saxpy, n, 0.5f, read(x), readwrite(y), on(gpu(0)));  // second launch: cached library
  rt.wait();
  auto hy = y.host();
  for (int i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(hy[i], 2.5f * static_cast<float>(i) + 1.0f) << "at " << i;
  ASSERT_FLOAT_EQ(hy[n - 1], 2.5f * static_cast<float>(n - 1) + 1.0f);
}

TEST_F(NvrtcGpu, ScalarsArriveAsTheirCTypes) {
  Runtime& rt = *rt_;
  const KernelRef k = rt.cuda_kernel(R"(
extern "C" __global__ void scalars(double d, long long l, unsigned char c, bool b, unsigned u, short s,
                                   double* out) {
  out[0] = d; out[1] = (double)l; out[2] = c; out[3] = b ? 1.0 : 0.0; out[4] = u; out[5] = s;
}
)", "scalars", {"out"});
  auto out = rt.buffer<double>(6);
  // An explicit launch: one thread (grid 1, block 1).
  rt.submit(k, -0.375, std::int64_t{-(std::int64_t{1} << 40)}, 250, true, 4000000000LL, -12, write(out), 1, 1, 1, 1, 1,
            1, 0, on(gpu(0)));
  rt.wait();
  auto h = out.host();
  EXPECT_EQ(h[0], -0.375);
  EXPECT_EQ(h[1], -std::ldexp(1.0, 40));
  EXPECT_EQ(h[2], 250.0);
  EXPECT_EQ(h[3], 1.0);
  EXPECT_EQ(h[4], 4000000000.0);
  EXPECT_EQ(h[5], -12.0);
}

TEST_F(NvrtcGpu, DynamicSharedMemoryAboveTheDefaultLimit) {
  Runtime& rt = *rt_;
  // Each block sums its slice through 64 KiB of dynamic shared memory (above
  // the 48 KiB a kernel gets without opting in).
  const KernelRef k = rt.cuda_kernel(R"(
extern "C" __global__ void block_sums(const float* in, float* sums, int n) {
  extern __shared__ float scratch[];
  const int per_thread = 16384 / blockDim.x;
  float s = 0;
  for (int j = 0; j < per_thread; ++j) {
    int i = blockIdx.x * 16384 + threadIdx.x * per_thread + j;
    scratch[threadIdx.x * per_thread + j] = i < n ? in[i] : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int j = 0; j < 16384; ++j) s += scratch[j];
    sums[blockIdx.x] = s;
  }
}
)", "block_sums", {"sums"});
  const int n = 4 * 16384;
  auto in = rt.buffer<float>(n);
  auto sums = rt.buffer<float>(4);
  {
    auto h = in.host();
    for (int i = 0; i < n; ++i) h[i] = 1.0f;
  }
  rt.submit(k, read(in), write(sums), n, 4, 1, 1, 256, 1, 1, 64 * 1024, on(gpu(0)));
  rt.wait();
  auto h = sums.host();
  for (int b = 0; b < 4; ++b) EXPECT_EQ(h[b], 16384.0f) << "block " << b;
}

TEST_F(NvrtcGpu, CompileErrorIsReportedAtDefinition) {
  Runtime& rt = *rt_;
  // NVRTC compiles it for this runtime's GPUs when it is defined, not at the first run.
  try {
    rt.cuda_kernel(R"(
extern "C" __global__ void broken(float* y) { y[0] = not_declared_anywhere; }
)", "broken");
    ADD_FAILURE() << "a kernel that does not compile was defined";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("not_declared_anywhere"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(rt.has_kernel("broken"));
  // The runtime still works, and the name is free for a source that compiles.
  const KernelRef fixed = rt.cuda_kernel(R"(
extern "C" __global__ void broken(float* y) { y[0] = 7.0f; }
)", "broken", {"y"});
  auto y = rt.buffer<float>(1);
  rt.submit(fixed, write(y), 1, 1, 1, 1, 1, 1, 0, on(gpu(0)));
  rt.wait();
  EXPECT_EQ(y.host()[0], 7.0f);
}

TEST_F(NvrtcGpu, CompileOverTheLimitFailsTheDefinitionNotTheGpu) {
  Runtime::Options options = gpu_options();
  options.compile_limit = std::chrono::milliseconds(50);
  Runtime rt(options);
  const std::string heavy = testing::heavy_cuda_source(18);  // seconds of NVRTC
  try {
    rt.cuda_kernel(heavy, "heavy", {"y"});
    ADD_FAILURE() << "the heavy source compiled within 50 ms";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("within the 0.05 s limit"), std::string::npos) << e.what();
  }
  // While NVRTC still works on it, the GPU runs tasks.
  auto y = rt.buffer<float>(4);
  rt.submit("fill", write(y), 3.0, on(gpu(0)));
  rt.wait();
  EXPECT_EQ(y.host()[3], 3.0f);
  // Let the overrun compile end before the process does.
  std::this_thread::sleep_for(std::chrono::seconds(10));
}

}  // namespace
}  // namespace ferry
