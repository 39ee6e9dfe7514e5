// Host-to-host transfers, the fetching side: a client told this ferryd to
// pull part of one of its replicas from another ferryd, which the client
// granted a capability to read it (docs/protocol.md, grant and fetch). A
// fetch signs in at the source with the capability's secret as its token
// and a signature by its own host key (the grant names it), is refused
// before it shows the capability when the source's host key is not the
// one the client pinned, and gets the bytes in chunks with a window in
// flight, each received by UCX straight into the replica.
//
// The client names the source, so a tenant can name anything: a silent
// port, a service that is not a ferryd, its own fake ferryd. Hence the
// limits (docs/security.md): only sources the operator allows are dialled
// (FetchSources); a few threads run every fetch, a client has few in flight
// and a bounded queue (FetchLimits); anything at the source's address that
// is not a ferryd earns one generic error, its words kept for ferryd's log.
//
// Fetches dial from a UCX worker of their own. UCX pairs the two endpoints
// of a link by the order each side created its endpoints to the other's
// worker; when two ferryd fetch from each other at once, or one ferryd
// dials the same source twice at once, the orders can differ on the two
// sides and UCX pairs one link's end with another's: every message then
// fails authentication. With their own worker, a ferryd's outgoing fetches
// and the connections it serves are never between the same two workers,
// and dials to one source take turns (only the dial: the gets run in
// parallel). Dials to other sources go on meanwhile, so a source that never
// answers stalls only the fetches that named it.
//
// One connection per source is kept and shared (docs/protocol.md, claim):
// the first fetch from a source signs in with its capability, and later
// ones, while the connection lives, claim theirs on it (an HMAC with the
// capability's secret over the connection's handshake digest), which saves
// the dial (a TCP handshake, a key exchange, two UCX endpoints). It is kept
// by the source's resolved address and the host key the fetch pinned, so
// a capability is shown only to the host its client pinned; a connection
// whose source failed is dropped, and one left idle closes after link_idle.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ferry/transport/identity.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/worker.hpp"
#include "fetch_sources.hpp"

namespace ferry {
class SlabPool;
}

namespace ferry::ferryd {

// A fetch mostly waits (for a dial, for gets in flight), so a few threads
// carry many; these bound what clients can make ferryd hold.
struct FetchLimits {
  std::size_t threads = 8;             // fetches in flight in all, each on one of this many threads
  std::size_t per_client = 2;          // in flight for one client (its identity: all its connections)
  std::size_t queued_per_client = 32;  // waiting for one client: more are refused
  std::size_t queued = 256;            // waiting in all
};

class PeerFetches {
 public:
  // Called on the progress thread: empty, or why the fetch failed.
  using Done = std::function<void(const std::string& error)>;

  // Where a fetch's bytes land. While it waits and dials, a fetch holds
  // nothing of the client's memory: a client that frees its replica then
  // gets it back at once. From its first get it holds the memory (`hold`),
  // and a client that frees the replica (`owner` expires) ends the fetch,
  // so memory the client's quota no longer counts goes back within a poll.
  struct Destination {
    std::byte* bytes = nullptr;
    std::weak_ptr<void> owner;
    std::function<std::shared_ptr<void>()> hold;  // null once `owner` is gone
  };

  // `worker` is the server's: `done` runs on its progress thread. Replicas
  // fetched into live in `pool` (may be null), registered with the fetches'
  // worker too. `host_key`: what it signs in at sources with (its own).
  PeerFetches(std::shared_ptr<transport::Worker> worker, std::shared_ptr<SlabPool> pool,
              std::optional<transport::KeyPair> host_key, FetchSources sources, FetchLimits limits = {});
  // Fails the fetches in flight and answers those waiting. A fetch still
  // dialling is abandoned, not waited for (a dial blocks until its timeout):
  // its thread ends on its own and holds nothing of the clients'.
  ~PeerFetches();
  PeerFetches(const PeerFetches&) = delete;
  PeerFetches& operator=(const PeerFetches&) = delete;

  // Queues a fetch for `client` (whose fetches share its limits). Empty:
  // `done` runs once it ended; otherwise why it was refused now (`done`
  // never runs).
  std::string start(const std::string& client, protocol::Fetch fetch, Destination to, Done done);

  // Chunks of a fetch: at most this much per get, and this many gets in
  // flight. Twice a client's ship window: a get is a round trip where a put
  // only streams, and each lands in the replica, so more in flight costs
  // no memory (a 256 MiB edge went from 0.87-0.99 of a ship to 0.97-1.04).
  static constexpr std::size_t chunk_bytes = std::size_t{4} << 20;
  static constexpr std::size_t window = 8;
  // How long a source may take to sign a fetch in.
  static constexpr std::chrono::seconds dial_timeout{10};
  // How often a fetch waiting for a get looks whether its replica was freed.
  static constexpr std::chrono::milliseconds freed_poll{100};
  // A connection to a source serves at most this many fetches at once (a
  // second one is dialled past that), and closes after this long unused.
  static constexpr std::size_t link_users = 4;
  static constexpr std::chrono::seconds link_idle{30};
  static constexpr std::chrono::seconds idle_poll{5};

 private:
  struct Link;
  struct Job;
  struct Shared;
  static void serve(const std::shared_ptr<Shared>& shared, std::size_t runner);
  static void run(Shared& shared, const std::shared_ptr<Job>& job);

  std::shared_ptr<Shared> shared_;
};

}  // namespace ferry::ferryd
