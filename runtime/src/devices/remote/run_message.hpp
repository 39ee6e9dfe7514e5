// A task as the Run message that has a remote host run it: its kernel by
// name, its scalars by value and its buffers by the ids of their copies
// there, each acquired on the host's node (shipped if missing, pinned
// against eviction) as the message is made.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "data/coherence.hpp"
#include "data/task_record.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::detail {

// The wire's name for an access mode (the same values: protocol.hpp mirrors
// them; element types are one enumeration, ferry/dtype.hpp).
inline protocol::Mode wire(AccessMode m) { return static_cast<protocol::Mode>(static_cast<std::uint8_t>(m)); }

// A task's run message, its buffers acquired (pinned) as it is made.
struct Marshalled {
  protocol::Run run;
  RecordVector<std::uint64_t> ids;  // per buffer; 0 where not acquired (yet)
};

// Makes `task`'s run (request id `request`) on `node`, `views` being its
// buffers. `out` may be reused: its run keeps the capacity of its arguments.
// Throws what acquiring a buffer throws; the ids acquired so far are in `out`.
void marshal(TaskRecord* task, std::span<const std::shared_ptr<BufferState>> views, NodeLink& node,
             std::uint64_t request, Marshalled& out);

// Lets the copies acquired for a run be evicted again.
void unpin(std::span<const std::shared_ptr<BufferState>> views, std::span<const std::uint64_t> ids,
           NodeLink& node) noexcept;

}  // namespace ferry::detail
