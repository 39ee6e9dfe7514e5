// ferryd's watch over its GPUs (tools/ferryd/gpu_health.*) and the probes
// it answers (metrics.*), driven by a device list the test writes: a GPU
// cannot be made to fail here. ferryd_gpu_test's
// AStickyErrorTakesTheGpuOutOfService checks the same on a real GPU.
#include "gpu_health.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

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

// The status line and body of GET `path` on 127.0.0.1:port.
std::string http_get(std::uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to the metrics port");
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
  std::string response;
  if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return response;
}

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
