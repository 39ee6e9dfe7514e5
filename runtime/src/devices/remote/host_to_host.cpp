// Host-to-host transfers: a copy that only remote host A holds, needed by a
// task on remote host B, moves from A to B directly instead of A -> this
// process -> B (docs/architecture.md, Coherence). This runtime grants B a
// capability on A — a random id and a 32-byte secret, scoped to that one
// copy and to B's host key, read-only, for a few minutes — and tells B to
// fetch with it; B signs in at A with the secret as its token and a
// signature by its host key, and checks A's host key against the one this
// runtime saw. Not one byte of the data passes through here.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <future>

#include "devices/device_host.hpp"
#include "devices/remote/remote_device.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/trace.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/units.hpp"
#include "base/transfer_label.hpp"

namespace ferry::detail {

namespace {

// Long enough for B to sign in and fetch a large copy over a slow link; the
// grant also goes when the buffer is freed there or this runtime leaves.
constexpr std::uint32_t grant_lifetime_ms = 300'000;

// After a direct move from a host failed, moves from it go through this
// runtime for this long (a host B cannot reach would cost each edge B's dial
// timeout otherwise).
constexpr std::chrono::seconds retry_direct_after{30};

void expect_ok(const protocol::Message& reply, const std::string& host, const char* what) {
  const auto* ack = std::get_if<protocol::PutAck>(&reply);
  if (ack != nullptr && (ack->status == protocol::Status::quota_exceeded || ack->status == protocol::Status::out_of_memory))
    throw NoRoom(fmt::format("remote {} has no room: {}", host, ack->message));
  if (ack == nullptr || ack->status != protocol::Status::ok)
    throw RemoteError(fmt::format("remote {} refused the {}: {}: {}", host, what,
                                  ack ? protocol::to_string(ack->status) : "no acknowledgement",
                                  ack ? ack->message : ""));
}

}  // namespace

std::pair<std::string, transport::PublicKey> RemoteDevice::peer_address() const {
  const std::string address = host_.find(':') != std::string::npos ? fmt::format("[{}]:{}", host_, port_)
                                                                   : fmt::format("{}:{}", host_, port_);
  return {address, requests_.host_key()};
}

void RemoteDevice::grant_read(std::uint64_t capability, const protocol::Secret& secret,
                              const transport::PublicKey& reader, std::uint64_t id, std::size_t bytes) {
  const std::uint64_t req = requests_.next_id();
  auto reply = requests_.request(
      req, protocol::GrantRead{req, capability, secret, reader, id, 0, bytes, grant_lifetime_ms}, nullptr, 0);
  expect_ok(requests_.await(reply, "grant"), options_.address, "grant");
}

std::uint64_t RemoteDevice::fetch_from(RemoteDevice& source, std::uint64_t capability, const protocol::Secret& secret,
                                       std::uint64_t source_id, const HostRegion& shape) {
  const auto [address, host_key] = source.peer_address();
  const std::uint64_t id = memory_.new_id();
  const std::uint64_t req = requests_.next_id();
  protocol::Fetch fetch{req,     id,       shape.dtype, shape.rows, shape.cols, 0, shape.bytes(), address,
                        host_key, capability, secret,          source_id,  0};
  auto reply = requests_.request(req, fetch, nullptr, 0);
  // This host waits on the source, and would wait for good on one that was
  // stopped or cut off (its connection up, nothing coming). The source is
  // watched meanwhile (lent_: its liveness limit applies) and, once it is
  // lost, the move is given up: the replica dropped here ends this host's
  // fetch, and the data comes from its lineage instead.
  struct Lent {
    std::atomic<int>& n;
    explicit Lent(std::atomic<int>& count) : n(count) { ++n; }
    ~Lent() { --n; }
  } lent(source.lent_);
  const std::uint64_t source_epoch = source.epoch();
  while (reply.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    if (!alive()) break;  // await fails it with this host's loss
    if (!source.alive() || source.epoch() != source_epoch) {
      drop(id);
      throw RemoteError(fmt::format("its source {} was lost during the move", source.address()));
    }
  }
  const protocol::Message answer = requests_.await(reply, "fetch");
  const auto* ack = std::get_if<protocol::PutAck>(&answer);
  // A fetch that failed after the host made the replica leaves it there: drop it.
  if (ack != nullptr && ack->status != protocol::Status::ok) drop(id);
  expect_ok(answer, options_.address, "fetch");
  return id;
}

std::optional<std::uint64_t> RemoteDevice::copy_from(NodeLink& source, std::uint64_t source_id,
                                                     const HostRegion& shape) {
  auto* peer = dynamic_cast<RemoteDevice*>(&source);
  // A host that dials in has no address another host could dial.
  if (peer == nullptr || peer == this || peer->reverse() || reverse() || !options_.host_to_host) return std::nullopt;
  if (!alive() || !peer->alive() || shape.bytes() == 0) return std::nullopt;
  {
    std::lock_guard lock(direct_mutex_);
    auto it = no_direct_until_.find(peer);
    if (it != no_direct_until_.end() && std::chrono::steady_clock::now() < it->second) return std::nullopt;
  }
  const transport::Nonce random = transport::random_nonce();
  std::uint64_t capability = 0;
  std::memcpy(&capability, random.data(), sizeof capability);
  protocol::Secret secret{};
  const transport::Nonce more = transport::random_nonce();
  std::memcpy(secret.data(), more.data(), secret.size());

  const std::int64_t start_ns = runtime().trace() ? runtime().trace()->now_ns() : 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    // For this host only, as its last handshake with us showed its key.
    peer->grant_read(capability, secret, peer_address().second, source_id, shape.bytes());
    const std::uint64_t id =
        with_room(shape.bytes(), [&] { return fetch_from(*peer, capability, secret, source_id, shape); });
    bytes_from_hosts_.fetch_add(shape.bytes(), std::memory_order_relaxed);
    // The scheduler prices data between these two hosts by this direct
    // link from now on (one hop), not by both hops through this process.
    runtime().links().record(peer->node(), node(), shape.bytes(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (auto* trace = runtime().trace()) {
      TransferSpan span;
      const TransferLabel& label = current_transfer_label;
      if (label.buffer != nullptr) span.buffer = *label.buffer;
      if (label.task != nullptr) span.task = *label.task;
      span.what = span.buffer.empty() ? "host-to-host" : "host-to-host " + span.buffer;
      span.link = peer->name() + "->" + name();
      span.lane = link_lane(/*to_device=*/false);
      span.start_ns = start_ns;
      span.end_ns = trace->now_ns();
      span.bytes = shape.bytes();
      trace->record(std::move(span));
    }
    log().debug("remote {}: {} pulled from {} directly", options_.address, format_bytes(shape.bytes()),
                peer->address());
    return id;
  } catch (const Error& e) {
    log().info("remote {}: moving {} from {} directly failed ({}); it goes through this runtime, and so do "
               "moves from there for the next {} s",
               options_.address, format_bytes(shape.bytes()), peer->address(), e.what(), retry_direct_after.count());
    std::lock_guard lock(direct_mutex_);
    no_direct_until_[peer] = std::chrono::steady_clock::now() + retry_direct_after;
    return std::nullopt;
  }
}

}  // namespace ferry::detail
