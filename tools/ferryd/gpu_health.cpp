#include "gpu_health.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ferry/log.hpp"
#include "ferry/units.hpp"

namespace ferry::ferryd {

GpuHealth::GpuHealth(Devices devices) : devices_(std::move(devices)) {
  for (const auto& device : devices_())
    if (device.kind == DeviceKind::cuda) gpus_.push_back(Gpu{device.name, {}, false});
  check();  // one lost before ferryd started serving counts as well
}

void GpuHealth::check() {
  if (gpus_.empty()) return;
  const auto devices = devices_();  // outside the lock: it asks every device
  std::lock_guard lock(mutex_);
  for (const auto& device : devices) {
    if (device.kind != DeviceKind::cuda || device.available) continue;
    const auto gpu = std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& g) { return g.name == device.name; });
    if (gpu == gpus_.end() || gpu->down) continue;
    gpu->down = true;
    gpu->reason = device.down_reason.empty() ? "no reason given" : device.down_reason;
    const std::uint32_t down = down_.fetch_add(1, std::memory_order_acq_rel) + 1;
    const std::string left =
        down == gpus_.size()
            ? std::string("no GPU is left: /readyz and /healthz answer 503 until ferryd restarts")
            : fmt::format("{} of {} left", gpus_.size() - down, plural(gpus_.size(), "GPU"));
    log().error("ferryd: GPU {} is down after a CUDA error that only a restart clears ({}); clients are no longer "
                "offered it; {}",
                gpu->name, gpu->reason, left);
  }
}

bool GpuHealth::is_down(std::string_view device) const {
  if (down() == 0) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(gpus_.begin(), gpus_.end(), [&](const Gpu& g) { return g.down && g.name == device; });
}

std::string GpuHealth::unusable() const {
  if (gpus_.empty() || down() < gpus_.size()) return {};
  std::lock_guard lock(mutex_);
  std::string why = "every GPU ferryd started with is down after a CUDA error that only a restart clears";
  for (const Gpu& g : gpus_) why += fmt::format("; {}: {}", g.name, g.reason);
  return why;
}

}  // namespace ferry::ferryd
