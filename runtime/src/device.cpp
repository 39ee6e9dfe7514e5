#include "device.hpp"

#include <fmt/format.h>

namespace ferry::detail {

bool Device::matches(const Place& place) const noexcept {
  switch (place.kind) {
    case Place::Kind::any: return true;
    case Place::Kind::cpu: return kind_ == DeviceKind::cpu;
    case Place::Kind::gpu:
      return kind_ == DeviceKind::cuda && (place.index < 0 || name_ == fmt::format("cuda:{}", place.index));
    case Place::Kind::remote:
      return kind_ == DeviceKind::remote && (place.endpoint.empty() || name_.find(place.endpoint) != std::string::npos);
  }
  return false;
}

DeviceSnapshot Device::snapshot() const {
  DeviceSnapshot s;
  s.id = id_;
  s.name = name_;
  s.kind = kind_;
  s.node = node_;
  s.perf_key = perf_key_;
  s.peak = peak_;
  s.queued = queued_.load(std::memory_order_relaxed);
  const auto backlog = backlog_ns_.load(std::memory_order_relaxed);
  s.busy_until = backlog > 0 ? static_cast<double>(backlog) * 1e-9 / std::max(1u, lanes()) : 0.0;
  return s;
}

}  // namespace ferry::detail
