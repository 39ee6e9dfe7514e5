// ferryd's watch over its GPUs (tools/ferryd/gpu_health.*) and the probes
// it answers (metrics.*), driven by a device list the test writes: a GPU
// cannot be made to fail here. ferryd_gpu_test's
// AStickyErrorTakesTheGpuOutOfService checks the same on a real GPU.
#include "gpu_health.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../integration/http_get.hpp"
#include "metrics.hpp"

namespace ferry::ferryd {
namespace {

// The runtime's devices as the test sets them.
struct Devices {
  explicit Devices(unsigned gpus) {
    add("cpu", DeviceKind::cpu);
    for (unsigned i = 0; i < gpus; ++i) add("cuda:" + std::to_string(i), DeviceKind::cuda);
  }
  void add(std::string name, DeviceKind kind) {
    DeviceInfo& info = list.emplace_back();
    info.id = static_cast<DeviceId>(list.size() - 1);
    info.name = std::move(name);
    info.kind = kind;
  }
  void lose(unsigned gpu, const std::string& why) {
    std::lock_guard lock(mutex);
    list[gpu + 1].available = false;
    list[gpu + 1].down_reason = why;
  }
  GpuHealth::Devices source() {
    return [this] {
      std::lock_guard lock(mutex);
      return list;
    };
  }
  std::mutex mutex;
  std::vector<DeviceInfo> list;
};

const std::string illegal_address = "an illegal memory access was encountered (cudaErrorIllegalAddress)";

TEST(GpuHealth, AGpuIsDownFromTheCheckAfterItsLossAndForGood) {
  Devices devices(2);
  GpuHealth health(devices.source());
  EXPECT_EQ(health.started(), 2u);
  EXPECT_EQ(health.down(), 0u);
  devices.lose(0, illegal_address);
  EXPECT_FALSE(health.is_down("cuda:0")) << "down before any check saw it";
  health.check();
  EXPECT_EQ(health.down(), 1u);
  EXPECT_TRUE(health.is_down("cuda:0"));
  EXPECT_FALSE(health.is_down("cuda:1"));
  EXPECT_FALSE(health.is_down("cpu"));
  EXPECT_EQ(health.unusable(), "") << "one GPU of two is left";
  health.check();
  EXPECT_EQ(health.down(), 1u) << "a GPU counted twice";

  devices.lose(1, "unspecified launch failure (cudaErrorLaunchFailure)");
  health.check();
  EXPECT_EQ(health.down(), 2u);
  const std::string why = health.unusable();
  EXPECT_NE(why.find("every GPU"), std::string::npos) << why;
  EXPECT_NE(why.find("cuda:0: " + illegal_address), std::string::npos) << why;
  EXPECT_NE(why.find("cuda:1: unspecified launch failure"), std::string::npos) << why;
}

TEST(GpuHealth, AGpuLostBeforeFerrydStartedServingIsDownAtOnce) {
  Devices devices(1);
  devices.lose(0, illegal_address);
  GpuHealth health(devices.source());
  EXPECT_TRUE(health.is_down("cuda:0"));
  EXPECT_NE(health.unusable(), "");
}

TEST(GpuHealth, AHostWithoutGpusHasNoneToLose) {
  Devices devices(0);
  GpuHealth health(devices.source());
  health.check();
  EXPECT_EQ(health.started(), 0u);
  EXPECT_EQ(health.unusable(), "");
  GpuHealth watching_nothing;  // a ServerState's before ferryd sets it
  watching_nothing.check();
  EXPECT_EQ(watching_nothing.unusable(), "");
}

using ferry::test::http_get;

TEST(GpuHealth, ProbesFailNamingTheGpusOnceEveryOneIsDown) {
  Devices devices(2);
  GpuHealth health(devices.source());
  Metrics metrics;
  metrics.on_health([&health] {
    health.check();
    return health.unusable();
  });
  const auto port = metrics.serve("127.0.0.1", 0);
  EXPECT_NE(http_get(port, "/readyz").find("503"), std::string::npos) << "ready before set_ready";
  metrics.set_ready(true);
  EXPECT_NE(http_get(port, "/readyz").find("200 OK"), std::string::npos);

  devices.lose(0, illegal_address);
  EXPECT_NE(http_get(port, "/readyz").find("200 OK"), std::string::npos) << "one GPU is left";
  EXPECT_NE(http_get(port, "/healthz").find("200 OK"), std::string::npos) << "one GPU is left";

  devices.lose(1, illegal_address);
  const std::string ready = http_get(port, "/readyz");
  EXPECT_NE(ready.find("503 Service Unavailable"), std::string::npos) << ready;
  EXPECT_NE(ready.find("not ready: every GPU"), std::string::npos) << ready;
  EXPECT_NE(ready.find("cuda:1: " + illegal_address), std::string::npos) << ready;
  const std::string live = http_get(port, "/healthz");
  EXPECT_NE(live.find("503 Service Unavailable"), std::string::npos) << live;
  EXPECT_NE(live.find("not live: every GPU"), std::string::npos) << live;
  metrics.stop_serving();
}

TEST(GpuHealth, TheMetricSaysWhichDeviceIsDown) {
  Metrics metrics;
  metrics.device_up("cpu", true);
  metrics.device_up("cuda:0", false);
  const std::string body = metrics.scrape();
  EXPECT_NE(body.find("ferry_device_up{device=\"cpu\"} 1"), std::string::npos) << body;
  EXPECT_NE(body.find("ferry_device_up{device=\"cuda:0\"} 0"), std::string::npos) << body;
}

}  // namespace
}  // namespace ferry::ferryd
