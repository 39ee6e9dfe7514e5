// Host-to-host transfers (docs/protocol.md, grant and fetch): a client
// grants another ferryd the right to read part of one of its replicas here
// (grant), and tells that ferryd to pull it (fetch); a capability peer is
// that other ferryd, signed in with the grant's secret, which may read the
// granted region and nothing else.
#include <fmt/format.h>

#include <algorithm>

#include <chrono>

#include "ferry/log.hpp"
#include "ferry/printable.hpp"
#include "session.hpp"

namespace ferry::ferryd {

using protocol::Status;
using protocol::Type;

void Session::on_grant(const protocol::GrantRead& grant) {
  auto refuse = [&](Status status, std::string why) {
    send(protocol::PutAck{grant.request, grant.buffer, status, std::move(why)});
  };
  auto it = replicas_.find(grant.buffer);
  if (it == replicas_.end())
    return refuse(Status::unknown_buffer, fmt::format("buffer {} is not held for this client", grant.buffer));
  const auto& replica = it->second;
  if (grant.offset > replica->bytes || grant.length > replica->bytes - grant.offset)
    return refuse(Status::bad_arguments, fmt::format("bytes [{}, {}) lie outside buffer {} of {} bytes", grant.offset,
                                                     grant.offset + grant.length, grant.buffer, replica->bytes));
  if (std::all_of(grant.reader.begin(), grant.reader.end(), [](std::uint8_t b) { return b == 0; }))
    return refuse(Status::bad_arguments, "a grant must name its reader's host key");
  Capability capability;
  capability.id = grant.capability;
  capability.secret.assign(reinterpret_cast<const char*>(grant.secret.data()), grant.secret.size());
  capability.reader = grant.reader;
  capability.owner = this;
  capability.session = weak_from_this();
  capability.buffer = grant.buffer;
  capability.offset = grant.offset;
  capability.length = grant.length;
  capability.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grant.lifetime_ms);
  std::string why;
  if (!server_.capabilities->add(std::move(capability), why)) return refuse(Status::bad_arguments, why);
  audit("grant", {{"capability", grant.capability},
                  {"reader", transport::fingerprint(grant.reader)},
                  {"buffer", grant.buffer},
                  {"offset", grant.offset},
                  {"length", grant.length},
                  {"lifetime_ms", grant.lifetime_ms}});
  send(protocol::PutAck{grant.request, grant.buffer, Status::ok, {}});
}

void Session::on_fetch(const protocol::Fetch& fetch) {
  const auto answer = [&](Status status, const std::string& why) {
    send(protocol::PutAck{fetch.request, fetch.buffer, status, clip(why)});
  };
  std::pair<Status, std::string> refusal;
  auto replica = replica_for(fetch.buffer, fetch.dtype, fetch.rows, fetch.cols, "fetch", refusal);
  if (!replica) return answer(refusal.first, refusal.second);
  if (!server_.fetches) return answer(Status::internal, "this ferryd does not fetch from other hosts");
  if (replica->host_only()) return start_fetch(fetch, replica);
  // The bytes land in host memory: the GPU's copy goes first (and what
  // only it holds comes home, for the bytes the fetch leaves as they are).
  with_host(replica, /*for_writing=*/true, nullptr, [this, fetch, replica](Status status, const std::string& why) {
    if (status != Status::ok) return send(protocol::PutAck{fetch.request, fetch.buffer, status, clip(why)});
    start_fetch(fetch, replica);
  });
}

void Session::start_fetch(const protocol::Fetch& fetch, const std::shared_ptr<Replica>& replica) {
  const auto answer = [&](Status status, const std::string& why) {
    send(protocol::PutAck{fetch.request, fetch.buffer, status, clip(why)});
  };
  log().debug("client {}: fetching {} bytes of buffer {} from {} (capability {})", describe(), fetch.length,
              fetch.buffer, printable(fetch.source), fetch.capability);
  // The fetch holds the replica only while bytes land in it: a client that
  // frees it gets its memory (and its quota) back, the fetch ends.
  std::weak_ptr<Replica> weak_replica = replica;
  PeerFetches::Destination to{replica->host + fetch.offset, weak_replica, [weak_replica]() -> std::shared_ptr<void> {
                                auto held = weak_replica.lock();
                                return held ? std::make_shared<AnyBuffer>(held->buffer) : nullptr;
                              }};
  std::weak_ptr<Session> weak = weak_from_this();
  const std::string refused =
      server_.fetches->start(share_key_, fetch, std::move(to), [weak, fetch, weak_replica](const std::string& error) {
        if (auto self = weak.lock()) self->fetched(fetch, weak_replica.lock(), error);
      });
  if (!refused.empty())
    answer(Status::internal, fmt::format("fetching from {} refused: {}", printable(fetch.source), refused));
}

// `replica` is the one the bytes went to, which a free and a put of the
// same id since may have replaced (null: freed): only its bytes count as written.
void Session::fetched(const protocol::Fetch& fetch, const std::shared_ptr<Replica>& replica, const std::string& error) {
  if (state_ == State::closed) return;
  audit("fetch", {{"source", fetch.source},
                  {"capability", fetch.capability},
                  {"buffer", fetch.buffer},
                  {"bytes", fetch.length},
                  {"status", error.empty() ? "ok" : "failed"}});
  if (!error.empty()) {
    log().info("client {}: fetching buffer {} from {} failed: {}", describe(), fetch.buffer, printable(fetch.source),
               printable(error, 1024));
    return send(protocol::PutAck{fetch.request, fetch.buffer, Status::internal,
                                 clip(fmt::format("fetching from {} failed: {}", printable(fetch.source), error))});
  }
  if (replica) {
    // The bytes came from the client's own replica elsewhere: the client's data.
    replica->spoiled.clear();
    replica->written.add(fetch.offset, fetch.length);
    if (replica->written.too_fragmented()) replica->written.zero_unwritten(replica->host);
  }
  send(protocol::PutAck{fetch.request, fetch.buffer, Status::ok, {}});
}

void Session::dispatch_capability(protocol::Message& message) {
  const Type type = protocol::type_of(message);
  const CapabilityPeer& peer = *capability_peer_;
  // The capability a refusal names: the one the get read under, else the
  // first this connection holds.
  std::uint64_t named = peer.held.empty() ? 0 : peer.held.begin()->first;
  // Anything but reading what was granted is refused, loudly: the peer is
  // a host the client named, and it has no business asking for more.
  auto refuse = [&](const std::string& why) {
    audit("capability_refused", {{"capability", named}, {"request", protocol::to_string(type)}, {"why", why}});
    fail(Status::auth_failed, fmt::format("capability {}: {}", named, why));
  };
  if (type == Type::ping) return send(protocol::Pong{std::get<protocol::Ping>(message).request});
  if (type == Type::claim) return on_claim(std::get<protocol::Claim>(message));
  if (type != Type::get) return refuse(fmt::format("a {} is not allowed: only gets of the granted region",
                                                   protocol::to_string(type)));
  const auto& get = std::get<protocol::Get>(message);
  // Which grant it reads under: the one it names, or, from a peer that
  // names none (before claims existed), the one it holds when it holds one.
  if (get.under.capability) {
    named = *get.under.capability;
  } else if (peer.held.size() != 1) {
    return refuse("a get on a connection holding several capabilities must name the one it reads under");
  }
  const auto held = peer.held.find(named);
  if (held == peer.held.end()) return refuse("this connection does not hold it");
  // The grant it claimed, not whatever is granted under its id now. Gone
  // (expired, withdrawn, freed) is this get's refusal, not the
  // connection's: other grants it holds may still be read.
  const auto answer = [&](Status status, const std::string& why) {
    send(protocol::Data{get.request, get.buffer, get.offset, status,
                        clip(fmt::format("capability {}: {}", named, why))});
  };
  const auto capability = server_.capabilities->find(named, held->second);
  if (!capability) return answer(Status::auth_failed, "the capability expired or was withdrawn");
  if (!capability->covers(get.buffer, get.offset, get.length))
    return refuse(fmt::format("bytes [{}, {}) of buffer {} lie outside the grant ([{}, {}) of buffer {})", get.offset,
                              get.offset + get.length, get.buffer, capability->offset,
                              capability->offset + capability->length, capability->buffer));
  auto owner = capability->session.lock();
  auto replica = owner ? owner->replica(get.buffer) : nullptr;
  if (!replica) return answer(Status::unknown_buffer, "the granting client freed the buffer or went away");
  if (get.offset > replica->bytes || get.length > replica->bytes - get.offset)
    return refuse(fmt::format("bytes [{}, {}) lie outside buffer {} of {} bytes", get.offset, get.offset + get.length,
                              get.buffer, replica->bytes));
  send_data(get, replica);
}

// A capability peer holding one more capability on this connection. Its
// proof is an HMAC keyed with the capability's secret over this
// connection's handshake digest: the secret never crosses the wire, and a
// proof seen on one connection is worth nothing on another.
void Session::on_claim(const protocol::Claim& claim) {
  CapabilityPeer& peer = *capability_peer_;
  const auto answer = [&](Status status, const std::string& why) {
    audit("claim",
          {{"capability", claim.capability}, {"result", status == Status::ok ? "ok" : "refused"}, {"why", why}});
    send(protocol::PutAck{claim.request, claim.capability, status, why});
  };
  // Refusals answer the claim and keep the connection (the grants it holds
  // stay readable), up to a bound: a peer that keeps guessing is dropped.
  const auto refused = [&](const std::string& why) {
    if (++peer.refused_claims > max_refused_claims) {
      audit("capability_refused", {{"capability", claim.capability}, {"request", "claim"}, {"why", why}});
      return fail(Status::auth_failed,
                  fmt::format("{} claims refused on this connection: {}", peer.refused_claims, why));
    }
    answer(Status::auth_failed, why);
  };
  // One answer whether the id is unknown, used or its secret wrong: a peer
  // learns nothing of which ids are live (the same words as the sign-in's).
  const std::string unknown =
      fmt::format("capability {} is unknown, expired or used, or its secret is wrong", claim.capability);
  const auto found = server_.capabilities->find(claim.capability);
  if (!found || found->claimed || !transport::verify_claim(found->secret, peer.binding, claim.capability, claim.mac))
    return refused(unknown);
  if (found->reader != peer.reader)
    return refused(fmt::format("capability {} was granted to host key {}, and this connection signed in with {}",
                               claim.capability, transport::fingerprint(found->reader),
                               transport::fingerprint(peer.reader)));
  std::erase_if(peer.held, [&](const auto& entry) { return !server_.capabilities->find(entry.first, entry.second); });
  if (peer.held.size() >= Capabilities::max_per_owner)
    return refused(fmt::format("this connection holds {} capabilities already (at most {})", peer.held.size(),
                               Capabilities::max_per_owner));
  // Still unclaimed, and still the grant whose secret was checked.
  const auto serial = server_.capabilities->claim(claim.capability, found->serial);
  if (!serial) return refused(unknown);
  peer.held.emplace(claim.capability, *serial);
  answer(Status::ok, {});
}

}  // namespace ferry::ferryd
