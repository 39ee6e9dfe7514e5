// A connection to a peer over a UCP endpoint, carrying messages: a header
// (an active-message header: Ferry's protocol control message) and an
// optional payload (the AM data, which UCX moves eagerly or by rendezvous,
// zero-copy where the transport can).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/transport/protocol.hpp"
#include "ferry/transport/secure_channel.hpp"
#include "ferry/transport/worker.hpp"

namespace ferry::transport {

class Worker;

// An arriving message, valid only during the on_message callback (which runs
// on the progress thread). The handler decides there where the payload goes:
// into() places it (a copy for eager data, a zero-copy rendezvous receive for
// large data) and calls `done` when it is there; without into() it is dropped.
class Incoming {
 public:
  virtual ~Incoming() = default;
  virtual std::span<const std::byte> header() const noexcept = 0;
  virtual std::size_t payload_bytes() const noexcept = 0;
  // `dest` must hold payload_bytes() and stay valid until `done` is called
  // (on the progress thread) with an empty string, or an error text.
  virtual void into(void* dest, std::function<void(const std::string& error)> done) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Called on the progress thread.
  using MessageHandler = std::function<void(Connection&, Incoming&)>;
  // The peer went away or the endpoint failed; called once, on the progress thread.
  using ErrorHandler = std::function<void(Connection&, const std::string& reason)>;

  // An endpoint to a peer's UCX worker, whose address came over the
  // authenticated bootstrap (transport/bootstrap.hpp); `peer` names it in
  // logs. With a channel, every message is sealed and opened with it
  // (null: plaintext). Both ends create theirs; UCX pairs them. With a
  // shared-memory lane (both ends agreed in the handshake), a second
  // endpoint carries every message over shared memory; the first still
  // judges the peer's liveness, and its failure closes both. With bulk lanes, two more
  // endpoints carry the messages that have a payload, one per direction;
  // `accepted` says which end this is (the one that accepted the dial).
  // `peer_pid`, with a shared-memory lane and no channel: the peer's
  // process, proven by the bootstrap (loopback_peer_is_process); once the
  // two ends' probes read back, large payloads are pulled out of the
  // sender's memory rather than sent (docs/protocol.md, "Pulled payloads").
  // `local_address`: the address of this end's worker that it sent the
  // peer (Worker::address), when it sent one before this call; the
  // endpoints are made on that UCX worker. Empty: the current one, whose
  // address local_address() then says. `network_address`: the peer's
  // address of its network transports alone (Worker::network_address), from
  // which the control endpoint and bulk lanes are made, so that they use the
  // network even on one host, and with which the shared-memory lane gets
  // peer error handling; empty (an older peer): the whole address, and a
  // lane without error handling.
  static std::shared_ptr<Connection> to_worker(const std::shared_ptr<Worker>& worker,
                                               std::span<const std::uint8_t> worker_address, std::string peer,
                                               std::unique_ptr<SecureChannel> channel, MessageHandler on_message,
                                               ErrorHandler on_error, protocol::Lane lane = protocol::Lane::none,
                                               bool accepted = false, pid_t peer_pid = 0,
                                               std::span<const std::uint8_t> local_address = {},
                                               std::span<const std::uint8_t> network_address = {});

  virtual ~Connection() = default;

  // Thread-safe. The header is copied; the payload must stay valid until
  // `done` is called (on the progress thread) with an empty string or an
  // error text. Sending on a closed connection calls `done` with an error.
  // Messages arrive in the order sent, but with bulk lanes only among those
  // with a payload and among those without: either kind may overtake the other.
  virtual void send(std::vector<std::byte> header, const void* payload, std::size_t payload_bytes,
                    std::function<void(const std::string& error)> done) = 0;
  void send(std::vector<std::byte> header) { send(std::move(header), nullptr, 0, {}); }
  // A header-only message that may wait a moment (at most Worker::cork_limit)
  // to leave in one piece with others: for a reply when more replies are
  // coming, a request that waits on earlier ones anyway. Order with every
  // other send is kept; a send() after it takes it along at once.
  // Thread-safe; `done` as for send().
  virtual void send_soon(std::vector<std::byte> header, std::function<void(const std::string& error)> done = {}) {
    send(std::move(header), nullptr, 0, std::move(done));
  }
  // What send_soon gathered leaves now: someone is about to wait for its
  // answer. Thread-safe; cheap when nothing waits.
  virtual void push() {}
  // A thread about to block until `ready()`, which only this connection's
  // traffic can make so (a reply), may take it in itself: Worker::wait_here.
  // Returns ready().
  virtual bool wait_here(const std::function<bool()>& ready) { return ready(); }

  // Handlers may be (re)set from an accept callback before any message is
  // delivered, or any time from the progress thread.
  virtual void set_handlers(MessageHandler on_message, ErrorHandler on_error) = 0;

  // Thread-safe: `done` is called (on the progress thread) once UCX's flush
  // of every endpoint of the connection (this end's bulk lane first, the
  // shared-memory lane last) completes, their wireup included, with an
  // empty string, or with an error text. A rendezvous payload the peer has
  // not pulled yet is not covered (UCX 1.13's flush returns before it, with
  // or without lanes): its send's `done` says when it is through.
  virtual void flush(std::function<void(const std::string& error)> done) = 0;

  // Flushes what was sent, then closes. Thread-safe; idempotent.
  virtual void close() = 0;
  // close() for a peer that said goodbye in the protocol and reads nothing
  // more: the endpoints are also freed at once, which UCX 1.13 does for a
  // flushed close only when the worker ends (a ferryd kept one or two per
  // client session). A shared-memory lane without error handling (an older
  // peer's) cannot be freed so and is kept as after close(). Thread-safe;
  // idempotent.
  virtual void close_after_goodbye() = 0;
  // Closes at once, unflushed: for a peer that stopped answering, whose
  // flush would wait for it (and UCX 1.13 cannot destroy a worker under a
  // close in flight). What was not sent yet is dropped. Thread-safe;
  // idempotent.
  virtual void abort() = 0;
  virtual bool closed() const noexcept = 0;
  // "ip:port" of the other side.
  virtual std::string peer() const = 0;
  // The addresses of this end's UCX worker that the connection's endpoints
  // are on, which the peer must make its endpoints to (a server's Worker
  // changes UCX workers over time: Worker::Options::sessions_per_generation).
  virtual Worker::Addresses local_addresses() const { return {}; }
  // Whether messages are sealed (AEAD); when, which cipher.
  virtual bool encrypted() const noexcept = 0;
};

}  // namespace ferry::transport
