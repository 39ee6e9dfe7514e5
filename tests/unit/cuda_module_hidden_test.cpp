// A CUDA build whose module is hidden ($FERRY_CUDA_MODULE names a file that
// does not exist, as ctest sets it for this program): the core starts, runs
// everything on the CPU, and says why it has no GPU. On a build without
// CUDA the same test sees "not built".
#include <gtest/gtest.h>

#include <string>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

namespace ferry {
namespace {

TEST(HiddenCudaModule, CoreRunsOnTheCpuAndSaysWhy) {
  const cuda::ModuleStatus& status = cuda::module_status();
  if (config::with_cuda) {
    EXPECT_EQ(status.state, cuda::ModuleStatus::State::not_found) << status.detail;
    EXPECT_NE(status.detail.find(FERRY_HIDDEN_MODULE), std::string::npos) << status.detail;
    EXPECT_NE(status.detail.find("FERRY_CUDA_MODULE"), std::string::npos) << status.detail;
    EXPECT_NE(cuda::unavailable_reason().find("not loaded"), std::string::npos) << cuda::unavailable_reason();
  } else {
    EXPECT_EQ(status.state, cuda::ModuleStatus::State::not_built);
  }
  EXPECT_EQ(cuda::device_count(), 0);

  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "all";  // found by "all": none, and that is no error
  Runtime rt(o);
  for (const auto& d : rt.devices()) EXPECT_NE(d.kind, DeviceKind::cuda) << d.name;
  auto x = rt.buffer<double>(256);
  auto y = rt.buffer<double>(256);
  rt.submit("fill", write(x), 1.0);
  rt.submit("fill", write(y), 2.0);
  rt.submit("axpy", read(x), readwrite(y), 3.0);
  EXPECT_EQ(rt.submit("sum", read(y)).result(), 5.0 * 256);
  // Asked for by number, a GPU that is not there is an error naming the reason.
  o.gpus = "0";
  try {
    Runtime numbered(o);
    ADD_FAILURE() << "gpus=0 started without a GPU";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(config::with_cuda ? "not loaded" : "FERRY_WITH_CUDA=OFF"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ferry
