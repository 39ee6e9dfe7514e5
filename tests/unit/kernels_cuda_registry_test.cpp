// Which built-in kernels have a CUDA variant: all of them in a CUDA build,
// none without, but for the fused elementwise programs (CPU only: on a GPU
// their CUDA source is generated and compiled by NVRTC instead). Runs everywhere (no device needed); the variants themselves
// are checked against the CPU on a GPU in kernels_gpu_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ferry/config.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"
#include "runtime_test_support.hpp"

namespace {

using ferry::AccessMode;
using ferry::Arg;
using ferry::BufferArg;
using ferry::KernelArgs;

const std::vector<std::string> builtins{"axpy", "copy",  "dot",  "fill",  "gemm", "geqrf", "gesdd", "map",
                                        "nrm2", "potrf", "scal", "sum",  "syevd", "syrk",  "trsm"};
const std::vector<std::string> cpu_only{"fused0", "fused1", "fused2", "fused3", "fused4",
                                        "fused5", "fused6", "fused7", "fused8"};

const ferry::KernelDef& kernel(const std::string& name) { return ferry::testing::builtin_kernel(name); }

Arg buf(const BufferArg& b) { return Arg{b}; }
Arg text(std::string s) {
  Arg a;
  a.emplace<ferry::ScalarValue>(std::move(s));
  return a;
}

TEST(KernelsCudaRegistry, EveryBuiltinHasACudaVariantExactlyInCudaBuilds) {
  const std::vector<std::string> registered = ferry::KernelRegistry::global().names();
  for (const std::string& name : builtins) {
    SCOPED_TRACE(name);
    ASSERT_NE(ferry::KernelRegistry::global().find(name), nullptr);
    EXPECT_TRUE(static_cast<bool>(kernel(name).cpu));
    EXPECT_EQ(static_cast<bool>(kernel(name).cuda), ferry::config::with_cuda);
  }
  for (const std::string& name : cpu_only) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(static_cast<bool>(kernel(name).cpu));
    EXPECT_FALSE(static_cast<bool>(kernel(name).cuda));
  }
  // A new built-in must join a list above (and get a CUDA variant, or say why not).
  std::vector<std::string> all = builtins;
  all.insert(all.end(), cpu_only.begin(), cpu_only.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(registered, all);
}

// The CUDA map keeps its own copy of the op table; a name the CPU learns
// and the GPU does not would fail only on a GPU. Both list what they know
// when refusing a name, and the CUDA variant refuses before touching a device.
TEST(KernelsCudaRegistry, CudaMapKnowsTheOpsTheCpuMapKnows) {
  if (!ferry::config::with_cuda) GTEST_SKIP() << "built without CUDA: map has no CUDA variant";
  const BufferArg x{nullptr, ferry::DType::f32, 0, 0, 0, AccessMode::read};
  const BufferArg y{nullptr, ferry::DType::f32, 0, 0, 0, AccessMode::write};
  KernelArgs args{{buf(x), buf(y), text("no_such_op")}};
  std::string cpu_refusal;
  try {
    ferry::check_arguments(kernel("map"), args, "t");
  } catch (const ferry::UsageError& e) {
    cpu_refusal = e.what();
  }
  ASSERT_NE(cpu_refusal, "") << "the CPU map accepted an unknown op";
  // check_arguments filled in alpha's default; args now reads as at run time.
  std::string cuda_refusal;
  const std::string task = "t";
  ferry::ExecContext ctx{.args = args, .task_name = task, .worker = -1, .stream = nullptr, .device = 0, .result = std::nullopt};
  try {
    kernel("map").cuda(ctx);
  } catch (const ferry::UsageError& e) {
    cuda_refusal = e.what();
  }
  ASSERT_NE(cuda_refusal, "") << "the CUDA map accepted an unknown op";
  EXPECT_NE(cuda_refusal.find("map knows "), std::string::npos) << cuda_refusal;
  // The CPU message is the CUDA one behind the task/argument prefix.
  ASSERT_GE(cpu_refusal.size(), cuda_refusal.size());
  EXPECT_EQ(cpu_refusal.substr(cpu_refusal.size() - cuda_refusal.size()), cuda_refusal);
}

// Scalar kernels on an empty view answer as the CPU does, without a device.
TEST(KernelsCudaRegistry, CudaScalarKernelsOnEmptyViewsGiveTheCpuResult) {
  if (!ferry::config::with_cuda) GTEST_SKIP() << "built without CUDA: no CUDA variants";
  const BufferArg empty{nullptr, ferry::DType::f64, 0, 0, 0, AccessMode::read};
  const std::string task = "t";
  for (const std::string name : {"dot", "nrm2", "sum"}) {
    SCOPED_TRACE(name);
    std::vector<Arg> items{buf(empty)};
    if (name == "dot") items.push_back(buf(empty));
    KernelArgs args{items};
    ferry::check_arguments(kernel(name), args, task);
    ferry::ExecContext cpu{.args = args, .task_name = task, .worker = 0, .stream = nullptr, .device = -1, .result = std::nullopt};
    ferry::ExecContext gpu{.args = args, .task_name = task, .worker = -1, .stream = nullptr, .device = 0, .result = std::nullopt};
    kernel(name).cpu(cpu);
    kernel(name).cuda(gpu);
    ASSERT_TRUE(cpu.result.has_value());
    ASSERT_TRUE(gpu.result.has_value());
    EXPECT_EQ(*gpu.result, *cpu.result);
  }
}

}  // namespace
