// Link models: latency + bytes / bandwidth per directed pair of memory nodes.
#include "ferry/runtime/link_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry {

namespace {

// Below this a transfer's time is mostly latency: it says little about
// bandwidth, and is what refines the latency.
constexpr std::size_t small_transfer_bytes = 64 * 1024;
// Weight of a new measurement: recent transfers matter (links get congested),
// but one slow transfer moves the model by a quarter, not all the way.
constexpr double ema_weight = 0.25;

double blend(double old_value, double sample) { return old_value + ema_weight * (sample - old_value); }

}  // namespace

double LinkModels::seconds(MemoryNodeId from, MemoryNodeId to, std::size_t bytes) const {
  if (from == to) return 0;
  const Link link = get(from, to);
  if (link.bytes_per_second <= 0) return std::numeric_limits<double>::infinity();
  return link.latency_seconds + static_cast<double>(bytes) / link.bytes_per_second;
}

void LinkModels::set(MemoryNodeId from, MemoryNodeId to, Link link) {
  std::lock_guard lock(mutex_);
  links_[{from, to}] = link;
}

Link LinkModels::get(MemoryNodeId from, MemoryNodeId to) const {
  std::lock_guard lock(mutex_);
  const auto it = links_.find({from, to});
  return it == links_.end() ? Link{} : it->second;
}

void LinkModels::record(MemoryNodeId from, MemoryNodeId to, std::size_t bytes, double seconds) {
  if (from == to || !std::isfinite(seconds) || seconds <= 0) return;
  std::lock_guard lock(mutex_);
  Link& link = links_[{from, to}];
  const bool known = link.bytes_per_second > 0;
  const double size = static_cast<double>(bytes);
  if (bytes < small_transfer_bytes) {
    const double latency = known ? std::max(0.0, seconds - size / link.bytes_per_second) : seconds;
    link.latency_seconds = known ? blend(link.latency_seconds, latency) : latency;
    // An unknown link becomes usable with a pessimistic bandwidth (all the time
    // spent moving bytes); larger transfers correct it.
    if (!known && bytes > 0) link.bytes_per_second = size / seconds;
    return;
  }
  // Time beyond the latency is what the bytes took; if the measurement is
  // under the modelled latency, the latency is stale, so use the whole time.
  const double moving = seconds > link.latency_seconds ? seconds - link.latency_seconds : seconds;
  const double bandwidth = size / moving;
  link.bytes_per_second = known ? blend(link.bytes_per_second, bandwidth) : bandwidth;
}

}  // namespace ferry
