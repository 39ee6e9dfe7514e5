// One message on its way out (SendOp), header-only messages gathered into
// one AM (BatchOp), and the batch's framing, which the receiving end reads.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "completion.hpp"
#include "connection_impl.hpp"
#include "ferry/allocator/small_objects.hpp"

namespace ferry::transport {

struct ConnectionImpl::SendOp {
  SendOp(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes, Done done,
         unsigned am = ferry_am_id)
      : header(std::move(header)), payload(payload), payload_bytes(payload_bytes), done(std::move(done)), am(am) {}
  // Made on the sender's thread, freed on the progress thread.
  static void* operator new(std::size_t bytes) { return small_object_allocate(bytes, alignof(SendOp)); }
  static void operator delete(void* ptr, std::size_t bytes) noexcept { small_object_deallocate(ptr, bytes); }

  std::vector<std::byte> header;  // UCX 1.13 reads the AM header until the send completes
  const void* payload;
  std::size_t payload_bytes;
  Done done;
  // An encrypted connection's payload, sealed: what goes on the wire, in a
  // buffer from the worker's staging pool. Not zero-filled first: the seal
  // writes every byte, and a 4 MiB memset per chunk was a fifth of the
  // sender's work.
  std::shared_ptr<std::byte[]> sealed;
  // In its generation's `sending` and Worker::Impl::sending_payloads until done.
  Worker::Impl::Generation* counted = nullptr;
  bool soon = false;                // send_soon: may wait for company
  // Kept alive until the send starts: held here rather than by the function
  // queued for it, whose captures then fit std::function without a heap
  // allocation (one per message saved).
  std::shared_ptr<ConnectionImpl> sender;
  unsigned am;  // the pull messages go under AM ids of their own
};

// A batch's frames: [u32 length, little-endian][the header], one after another.
constexpr std::size_t frame_prefix = 4;
// Gathered up to this much, then sent: small enough to go eagerly in one piece.
constexpr std::size_t max_batch_bytes = std::size_t{64} << 10;

struct ConnectionImpl::BatchOp {
  std::vector<std::byte> frames;  // UCX reads them until the send completes
  std::vector<std::unique_ptr<SendOp>> ops;
};

}  // namespace ferry::transport
