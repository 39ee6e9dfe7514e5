// Whether the two ends of a bootstrap socket may share memory: the same
// host (loopback), the same user (shared memory segments and CMA need it;
// a mismatch would surface as transport errors on an endpoint that has no
// error handling), and shared-memory transports in this worker.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "ferry/transport/protocol.hpp"

namespace ferry::transport {

// The uid owning the other end of the connected TCP socket `fd`, when that
// end is on this host's loopback (read from /proc/net/tcp{,6}); nullopt
// otherwise or when it cannot be told.
std::optional<uid_t> loopback_peer_uid(int fd);

// True when process `pid` holds the other end of the connected loopback TCP
// socket `fd` (its socket's inode is among /proc/PID/fd): that a peer's
// claim to be `pid` is true, before this end reads payloads out of that
// process's memory. False when it cannot be told.
bool loopback_peer_is_process(int fd, pid_t pid);

// True when a shared-memory lane to the peer on `fd` can be offered: a
// loopback peer of this process's uid, UCX transports (as Worker::transports
// lists them) including shared memory but not CMA, and FERRY_SHARED_MEMORY
// not "0".
bool shared_memory_lane_possible(int fd, const std::string& transports);

// The lane a dialing end offers the peer on `fd`: shared memory where
// `shared_memory` allows it and it is possible, else bulk lanes
// (FERRY_BULK_LANES=0: none).
protocol::Lane lane_to_offer(int fd, const std::string& transports, bool shared_memory);

}  // namespace ferry::transport
