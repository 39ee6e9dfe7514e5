#include "devices/remote/bulk_channel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <future>

#include "data/coherence.hpp"
#include "devices/remote/run_message.hpp"

namespace ferry::detail {

std::size_t BulkChannel::chunk_for(std::size_t bytes) const noexcept {
  // Small enough that a transfer keeps the whole window busy (a single chunk
  // has nothing to overlap with), large enough to amortise per-chunk costs.
  constexpr std::size_t floor = std::size_t{256} << 10;
  const std::size_t limit =
      std::max<std::size_t>(1, std::min(chunk_bytes_, max_payload_.load(std::memory_order_relaxed)));
  const std::size_t spread = (bytes + window_ - 1) / window_;
  return std::min(limit, std::max(spread, std::min(floor, limit)));
}

template <typename Send, typename Check>
void BulkChannel::in_chunks(std::size_t bytes, const char* what, Send send, Check check) {
  const std::size_t chunk = chunk_for(bytes);
  std::deque<std::future<protocol::Message>> window;
  const auto settle_one = [&] {
    protocol::Message reply = requests_.await(window.front(), what);
    window.pop_front();
    check(reply);
  };
  std::size_t offset = 0;
  do {  // at least once: an empty put still makes the replica
    const std::size_t len = std::min(chunk, bytes - offset);
    if (window.size() >= window_) settle_one();
    window.push_back(send(offset, len));
    offset += len;
  } while (offset < bytes);
  while (!window.empty()) settle_one();
}

void BulkChannel::put(std::uint64_t id, const HostRegion& shape, const std::byte* data, std::size_t bytes) {
  in_chunks(
      bytes, "put",
      [&](std::size_t offset, std::size_t len) {
        const std::uint64_t req = requests_.next_id();
        return requests_.request(req, protocol::Put{req, id, shape.dtype, shape.rows, shape.cols, offset},
                                 data + offset, len);
      },
      [&](const protocol::Message& reply) {
        const auto* ack = std::get_if<protocol::PutAck>(&reply);
        if (ack != nullptr &&
            (ack->status == protocol::Status::quota_exceeded || ack->status == protocol::Status::out_of_memory))
          throw NoRoom(fmt::format("remote {} has no room: {}", address_, ack->message));
        if (ack == nullptr || ack->status != protocol::Status::ok)
          throw RemoteError(fmt::format("remote {} refused data: {}: {}", address_,
                                        ack ? protocol::to_string(ack->status) : "no acknowledgement",
                                        ack ? ack->message : ""));
      });
}

void BulkChannel::get(std::uint64_t id, std::byte* dest, std::size_t bytes) {
  in_chunks(
      bytes, "get",
      [&](std::size_t offset, std::size_t len) {
        const std::uint64_t req = requests_.next_id();
        return requests_.request(req, protocol::Get{req, id, offset, len}, nullptr, 0, {dest + offset, len});
      },
      [&](const protocol::Message& reply) {
        const auto* data = std::get_if<protocol::Data>(&reply);
        if (data == nullptr || data->status != protocol::Status::ok)
          throw RemoteError(fmt::format("remote {} could not send data back: {}: {}", address_,
                                        data ? protocol::to_string(data->status) : "no data",
                                        data ? data->message : ""));
      });
}

}  // namespace ferry::detail
