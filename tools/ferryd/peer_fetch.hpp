// Host-to-host transfers, the fetching side: a client told this ferryd to
// pull part of one of its replicas from another ferryd, which the client
// granted a capability to read it (docs/protocol.md, grant and fetch). Each
// fetch runs on a thread of its own, since dialling blocks and must not run
// on the progress thread; it signs in at the source with the capability's
// secret as its token and a signature by its own host key (the grant names
// it), checks the source's host key against the one the
// client pinned, and gets the bytes in chunks with a window in flight, each
// received by UCX straight into the replica.
//
// Fetches dial from a UCX worker of their own. UCX pairs the two endpoints
// of a link by the order each side created its endpoints to the other's
// worker; when two ferryd fetch from each other at once, or one ferryd
// dials the same source twice at once, the orders can differ on the two
// sides and UCX pairs one link's end with another's: every message then
// fails authentication. With their own worker, a ferryd's outgoing fetches
// and the connections it serves are never between the same two workers,
// and dials from it take turns (only the dial: the gets run in parallel).
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ferry/transport/connection.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry {
class SlabPool;
}

namespace ferry::ferryd {

class PeerFetches {
 public:
  // Called on the progress thread: empty, or why the fetch failed.
  using Done = std::function<void(const std::string& error)>;

  // `worker` is the server's: `done` runs on its progress thread. Replicas
  // fetched into live in `pool` (may be null), registered with the fetches'
  // worker too.
  // `host_key`: what it signs in at sources with (its own; none: it cannot fetch).
  PeerFetches(std::shared_ptr<transport::Worker> worker, std::shared_ptr<SlabPool> pool,
              std::optional<transport::KeyPair> host_key);
  // Fails the fetches in flight (their connections close) and waits for their threads.
  ~PeerFetches();
  PeerFetches(const PeerFetches&) = delete;
  PeerFetches& operator=(const PeerFetches&) = delete;

  // `dest` receives fetch.length bytes and must stay valid until `done`
  // ran; `keep` holds what owns it.
  void start(protocol::Fetch fetch, std::byte* dest, std::shared_ptr<void> keep, Done done);
  // Chunks of a fetch: at most this much per get, and this many gets in
  // flight. Twice a client's ship window: a get is a round trip where a put
  // only streams, and each lands in the replica, so more in flight costs
  // no memory (a 256 MiB edge went from 0.87-0.99 of a ship to 0.97-1.04).
  static constexpr std::size_t chunk_bytes = std::size_t{4} << 20;
  static constexpr std::size_t window = 8;

 private:
  struct Job;
  void run(const std::shared_ptr<Job>& job);

  std::shared_ptr<transport::Worker> worker_;        // the server's
  std::shared_ptr<transport::Worker> fetch_worker_;  // the fetches' own
  const std::optional<transport::KeyPair> host_key_;
  std::mutex dial_mutex_;                            // one dial at a time from fetch_worker_
  std::mutex mutex_;
  bool stopping_ = false;
  std::list<std::shared_ptr<Job>> jobs_;
  std::list<std::thread> threads_;
};

}  // namespace ferry::ferryd
