#include "devices/device.hpp"

#include <fmt/format.h>

#include <mutex>
#include <set>

#include "base/transfer_label.hpp"

namespace ferry::detail {

const std::string* lasting_name(const std::string& name) {
  static std::mutex mutex;
  static auto* names = new std::set<std::string, std::less<>>;  // never destroyed: handles outlive statics too
  std::lock_guard lock(mutex);
  return &*names->insert(name).first;
}

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

void Device::trace_transfer(Trace* trace, bool to_device, int lane, std::size_t bytes, std::int64_t start_ns) const {
  if (trace == nullptr) return;
  TransferSpan span;
  const TransferLabel& label = current_transfer_label;
  if (label.buffer != nullptr) span.buffer = *label.buffer;
  if (label.task != nullptr) span.task = *label.task;
  span.what = span.buffer.empty() ? (to_device ? "ship" : "fetch")
                                  : fmt::format("{} {}", to_device ? "ship" : "fetch", span.buffer);
  span.link = to_device ? "host->" + name_ : name_ + "->host";
  span.lane = lane;
  span.start_ns = start_ns;
  span.end_ns = trace->now_ns();
  span.bytes = bytes;
  trace->record(std::move(span));
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
  const auto ready = ready_backlog_ns_.load(std::memory_order_relaxed);
  s.ready_busy_until = ready > 0 ? static_cast<double>(ready) * 1e-9 / std::max(1u, lanes()) : 0.0;
  const auto link = link_backlog_ns_.load(std::memory_order_relaxed);
  s.link_busy_until = link > 0 ? static_cast<double>(link) * 1e-9 : 0.0;
  return s;
}

}  // namespace ferry::detail
