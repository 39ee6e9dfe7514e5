// The device conformance suite on the CPU device: each built-in does what
// its summary says (tests/support/builtin_conformance.hpp; the remote and
// GPU devices run the same suite in remote_test, ferryd_gpu_test and
// cuda_device_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "../support/builtin_conformance.hpp"
#include "ferry/ferry.hpp"

namespace {

ferry::Runtime::Options cpu_only() {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";
  return o;
}

TEST(DeviceConformance, TheCpuDeviceDoesWhatEveryBuiltinSays) {
  ferry::Runtime rt(cpu_only());
  EXPECT_EQ(ferry::test::expect_every_builtin_conforms(rt, {ferry::on(ferry::cpu()), "cpu", 0.0}),
            ferry::test::builtins_checked);
}

// A built-in added to the runtime is added to the suite too.
TEST(DeviceConformance, TheSuiteCoversEveryBuiltin) {
  ferry::Runtime rt(cpu_only());
  const auto& covered = ferry::test::conformance_kernels;
  for (const std::string& name : rt.kernel_names()) {
    if (name.starts_with("fused")) continue;  // fused programs: tests/unit/fused_test
    EXPECT_NE(std::ranges::find(covered, name), std::end(covered))
        << "built-in '" << name << "' is not in tests/support/builtin_conformance.hpp";
  }
}

}  // namespace
