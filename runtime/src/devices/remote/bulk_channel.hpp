// Bulk data to and from a remote host's copies, in chunks with a window of
// them in flight: a put or get of many megabytes is split so the transfer
// keeps the link busy while earlier chunks are acknowledged, and no one
// message is larger than the host takes (its max_payload).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "devices/remote/remote_requests.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

struct HostRegion;

// The remote refused data for lack of room (quota or memory): eviction may help.
struct NoRoom : RemoteError {
  using RemoteError::RemoteError;
};

class BulkChannel {
 public:
  // `address`: the host's, for errors; `chunk_bytes` the largest chunk,
  // `window` the chunks in flight per transfer.
  BulkChannel(RemoteRequests& requests, std::string address, std::size_t chunk_bytes, unsigned window)
      : requests_(requests), address_(std::move(address)), chunk_bytes_(chunk_bytes), window_(window) {}

  // What the host takes in one message, from its welcome (0: not said).
  void set_max_payload(std::size_t bytes) noexcept {
    max_payload_.store(bytes == 0 ? chunk_bytes_ : bytes, std::memory_order_relaxed);
  }

  // `bytes` of `data` into copy `id` (made with `shape`'s type and size),
  // in order; null data and no bytes makes the copy, unwritten. Throws
  // NoRoom when the host has no room, RemoteError when it refuses.
  void put(std::uint64_t id, const HostRegion& shape, const std::byte* data, std::size_t bytes);
  // The first `bytes` of copy `id` into `dest`.
  void get(std::uint64_t id, std::byte* dest, std::size_t bytes);

 private:
  std::size_t chunk_for(std::size_t bytes) const noexcept;
  // `send` issues the request for [offset, offset + length), `check` judges its reply.
  template <typename Send, typename Check>
  void in_chunks(std::size_t bytes, const char* what, Send send, Check check);

  RemoteRequests& requests_;
  const std::string address_;
  const std::size_t chunk_bytes_;
  const unsigned window_;
  std::atomic<std::size_t> max_payload_{0};
};

}  // namespace ferry::detail
