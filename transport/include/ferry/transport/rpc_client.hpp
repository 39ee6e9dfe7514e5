// Request/reply matching over a Connection, in the spirit of UCXX's
// requests: a request carries an id its reply repeats; the reply completes
// the request's future, and a data reply's payload lands where the request
// said, before the future is ready. A connection lost fails every request
// still waiting. Thread-safe; replies are matched on the progress thread.
//
// This is the one place where a reply's payload is held against what its
// request asked for (docs/security.md, "What a peer's reply may carry"):
// the payload lands only when it is a data reply with status ok and exactly
// the bytes asked for; anything else never touches the destination, fails
// the request and every other one waiting, and tells the caller, who drops
// the peer.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ferry/allocator/small_objects.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::transport {

class RpcClient {
 public:
  explicit RpcClient(std::string peer) : peer_(std::move(peer)) {}
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  std::uint64_t next_id() noexcept { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // Where a get's data lands, and exactly how many bytes the reply must
  // carry (not "at most": fewer would leave stale bytes that count as data).
  // `{}` (null, 0): a request whose reply carries no payload. (No member
  // initializers: a default argument of the class it is nested in.)
  struct Destination {
    void* data;
    std::size_t bytes;
  };

  // What a reply did to the request it names.
  struct Completion {
    bool matched = false;  // a request waited for it
    // Not empty: the reply broke its request (a payload it had no business
    // carrying, or the wrong size); that request and every other waiting
    // one failed with this, and the peer is not to be trusted further.
    std::string broken;
  };

  // Sends `message` (whose request field is `id`) with an optional payload,
  // which must stay valid until the future is ready. `dest` receives a data
  // reply's payload. Without a connection the future fails at once; a
  // message that cannot be encoded throws ProtocolError and sends nothing.
  // `soon`: a request without payload that may wait a moment for company
  // (Connection::send_soon).
  std::future<protocol::Message> request(const std::shared_ptr<Connection>& connection, std::uint64_t id,
                                         const protocol::Message& message, const void* payload = nullptr,
                                         std::size_t bytes = 0, Destination dest = {}, bool soon = false);
  // The same with the message encoded already (protocol::encode): a task's
  // run is encoded straight from it, not copied into a Message first.
  std::future<protocol::Message> request_encoded(const std::shared_ptr<Connection>& connection, std::uint64_t id,
                                                 std::vector<std::byte> header, const void* payload = nullptr,
                                                 std::size_t bytes = 0, Destination dest = {}, bool soon = false);

  // Progress thread: `reply` answers request `id`. Completes it (after
  // receiving its payload, if it has one), or fails it when the reply broke
  // it. A payload that is not taken is dropped (Incoming), unread. The
  // caller closes the connection of a Completion that says `broken`.
  Completion complete(std::uint64_t id, const protocol::Message& reply, Incoming& incoming);

  // Every request still waiting fails with RemoteError(reason), those whose
  // reply's payload is still arriving included (a peer that died mid-payload
  // on an endpoint without error handling never completes that receive).
  void fail_all(const std::string& reason);

  // Requests sent and not yet answered (or answered, their payload still landing).
  std::size_t waiting();

  // The reply, or RemoteError naming `what` when none comes within the limit.
  // With the connection it was sent on, this thread may take the reply in
  // itself before it blocks (Connection::wait_here).
  protocol::Message await(std::future<protocol::Message>& reply, const char* what,
                          Connection* sent_on = nullptr) const;

 private:
  // A request's slot is made on the requesting thread and freed on the
  // progress thread: it, its promise's state and its map node come from
  // the pool of small objects.
  struct Pending {
    std::promise<protocol::Message> reply{std::allocator_arg, SmallObjectAllocator<char>{}};
    Destination dest{};
    std::atomic<bool> answered{false};  // for one whose payload is arriving: set once, by whoever comes first
  };
  using PendingMap = std::unordered_map<std::uint64_t, std::shared_ptr<Pending>, std::hash<std::uint64_t>,
                                        std::equal_to<std::uint64_t>,
                                        SmallObjectAllocator<std::pair<const std::uint64_t, std::shared_ptr<Pending>>>>;
  // Answered, the payload still landing in dest. Shared with the receive's
  // callback, which may run after this client is gone (on the progress
  // thread, as its endpoint closes).
  struct Receiving {
    std::mutex mutex;
    PendingMap requests;
  };
  std::shared_ptr<Pending> take(std::uint64_t id);

  const std::string peer_;
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex mutex_;
  PendingMap pending_;
  const std::shared_ptr<Receiving> receiving_ = std::make_shared<Receiving>();
};

}  // namespace ferry::transport
