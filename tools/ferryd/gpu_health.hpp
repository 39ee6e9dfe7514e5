// Which of ferryd's GPUs still work. A sticky CUDA error (an illegal
// address, a launch failure) leaves a GPU's context unusable until the
// process restarts; the runtime then runs nothing more there
// (DeviceInfo::available). ferryd learns of it by asking the runtime, at
// each probe, scrape and welcome and when a client's task fails, and from
// then on offers clients only the GPUs still up, and logs each loss once.
// With every GPU it started with down, ferryd has nothing left that it was
// deployed for: /readyz and /healthz answer 503 so that its supervisor
// restarts it (docs/deployment.md). A CPU-only ferryd has nothing to lose.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/runtime/runtime.hpp"

namespace ferry::ferryd {

class GpuHealth {
 public:
  using Devices = std::function<std::vector<DeviceInfo>()>;

  GpuHealth() = default;  // no GPUs to watch
  // `devices` (the runtime's) is read now, for the GPUs ferryd starts with,
  // and again at each check().
  explicit GpuHealth(Devices devices);
  GpuHealth(const GpuHealth&) = delete;
  GpuHealth& operator=(const GpuHealth&) = delete;

  // Reads the devices; each GPU newly down is logged, once. Any thread.
  void check();
  std::uint32_t started() const noexcept { return static_cast<std::uint32_t>(gpus_.size()); }
  // Of those, how many were down at the last check: a GPU never comes back.
  std::uint32_t down() const noexcept { return down_.load(std::memory_order_acquire); }
  bool is_down(std::string_view device) const;
  // Why ferryd cannot serve what it was started for (every GPU it started
  // with is down), naming each GPU and its CUDA error; empty while it can.
  std::string unusable() const;

 private:
  struct Gpu {
    std::string name;           // "cuda:0"
    std::string reason;         // the CUDA error, once down
    bool down = false;
  };

  Devices devices_;
  mutable std::mutex mutex_;
  std::vector<Gpu> gpus_;  // fixed at construction; only their state changes
  std::atomic<std::uint32_t> down_{0};
};

}  // namespace ferry::ferryd
