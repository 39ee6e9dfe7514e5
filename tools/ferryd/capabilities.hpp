// Capabilities that clients granted on this host (host-to-host transfers,
// docs/security.md): each lets one peer — another ferryd the client named —
// sign in with the capability's secret as its token and a signature by its
// host key, and read one region of
// one of the client's replicas, until its deadline, the client frees the
// replica, or the client's session ends. Thread-safe: the bootstrap thread
// asks for secrets, the progress thread adds, finds and drops.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ferry/transport/bootstrap.hpp"

namespace ferry::ferryd {

class Session;

struct Capability {
  std::uint64_t id = 0;
  std::string secret;            // the token its peer signs in with
  transport::PublicKey reader{};  // and the host key it signs with: the ferryd the client named
  const Session* owner = nullptr;  // the granting session, for drop_owner (never dereferenced)
  std::weak_ptr<Session> session;  // the same, to read its replica through
  std::uint64_t buffer = 0, offset = 0, length = 0;
  std::chrono::steady_clock::time_point deadline;
  bool claimed = false;  // a peer signed in with it or claimed it: no one else may (one use)
  // Which grant this is, set by add(): a peer's session is bound to the
  // grant it claimed, not to the id, so a later grant under the same id
  // (another buffer, another reader, another client) is not its to read.
  std::uint64_t serial = 0;

  bool covers(std::uint64_t buf, std::uint64_t off, std::uint64_t len) const noexcept {
    return buf == buffer && off >= offset && len <= length && off - offset <= length - len;
  }
};

class Capabilities {
 public:
  // A client cannot make ferryd keep unbounded grants: past this many live
  // ones, a grant is refused.
  static constexpr std::size_t max_per_owner = 1024;

  // False, saying why, when the id is another owner's, a peer has claimed
  // it already (a claimed id is never granted again while it lives), or the
  // owner holds too many. The same owner granting an unclaimed id again
  // replaces it (a retry). Gives the grant a serial of its own.
  bool add(Capability capability, std::string& why);
  // What a peer signing in with a live capability no peer has claimed yet
  // must prove (bootstrap thread).
  std::optional<transport::CapabilityKeys> keys(std::uint64_t id);
  // The peer that signed in with it takes it: the grant's serial, or
  // nothing when one did already (two raced through the handshake) or it
  // is gone. Its session keeps using it (find with that serial); the
  // secret lets no one else in.
  // With `serial`: only while it is that same grant (a claim on a live
  // connection takes the grant whose secret it checked).
  std::optional<std::uint64_t> claim(std::uint64_t id, std::optional<std::uint64_t> serial = std::nullopt);
  // The live grant `id`; with a serial, only while it is that same grant.
  std::optional<Capability> find(std::uint64_t id, std::optional<std::uint64_t> serial = std::nullopt);
  void drop_owner(const Session* owner);
  void drop_buffer(const Session* owner, std::uint64_t buffer);
  std::size_t size();

 private:
  void expire(std::chrono::steady_clock::time_point now);  // mutex_ held

  std::mutex mutex_;
  std::map<std::uint64_t, Capability> by_id_;
  std::uint64_t next_serial_ = 1;
};

}  // namespace ferry::ferryd
