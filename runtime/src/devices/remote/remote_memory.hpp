// A remote host's copies of buffer regions, as this runtime names them:
// ids chosen here, a tile of a larger matrix packed row after row on the
// way (the host keeps it dense), unpacked on the way back, and freed by a
// message that wants no reply. Built on the bulk channel; what the copies
// hold and when they move is the coherence layer's (RemoteDevice is the
// NodeLink), and making room is the device's.
#pragma once

#include <atomic>
#include <cstdint>

#include "devices/remote/bulk_channel.hpp"
#include "devices/remote/remote_requests.hpp"

namespace ferry::detail {

struct HostRegion;

class RemoteMemory {
 public:
  RemoteMemory(RemoteRequests& requests, BulkChannel& bulk) : requests_(requests), bulk_(bulk) {}

  // A new copy's id (a copy made by another route, host to host, takes one too).
  std::uint64_t new_id() noexcept { return next_.fetch_add(1); }
  // A new copy holding `source`'s data; its id.
  std::uint64_t put(const HostRegion& source);
  // A new copy of `shape`, to be written there; its id.
  std::uint64_t make(const HostRegion& shape);
  // Copy `id`'s data into `dest`.
  void get(std::uint64_t id, const HostRegion& dest);
  void free(std::uint64_t id) noexcept;

 private:
  RemoteRequests& requests_;
  BulkChannel& bulk_;
  std::atomic<std::uint64_t> next_{1};
};

}  // namespace ferry::detail
