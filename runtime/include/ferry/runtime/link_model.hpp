// Cost of moving bytes between memory nodes: latency + bytes / bandwidth per
// directed pair, measured at connect time and refined from real transfers.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

#include "ferry/runtime/place.hpp"

namespace ferry {

struct Link {
  double latency_seconds = 0;
  double bytes_per_second = 0;  // 0: no link known
};

class LinkModels {
 public:
  // Seconds to move `bytes` from one node to another; 0 within a node;
  // infinity when no link is known.
  double seconds(MemoryNodeId from, MemoryNodeId to, std::size_t bytes) const;
  void set(MemoryNodeId from, MemoryNodeId to, Link link);
  // Folds a measured transfer into the model (an exponential moving average).
  void record(MemoryNodeId from, MemoryNodeId to, std::size_t bytes, double seconds);
  Link get(MemoryNodeId from, MemoryNodeId to) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<MemoryNodeId, MemoryNodeId>, Link> links_;
};

}  // namespace ferry
