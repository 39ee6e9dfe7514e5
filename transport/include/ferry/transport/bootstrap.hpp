// Ferry's own front door. UCX's connection manager never listens: ferryd
// listens on a plain TCP socket, served by one thread of its own (poll,
// non-blocking), which drops peers that stay silent or slow past a deadline,
// refuses addresses that connect too often and caps the handshakes in
// progress. On that socket the two sides authenticate each other and agree
// on session keys (docs/protocol.md, "Handshake"):
//
//   client -> hello      versions, name, an X25519 key, its Ed25519 identity (or none: the token)
//   server -> challenge  a nonce, its X25519 key, its host key, the cipher, a signature by the host key
//   client -> auth       a signature by its identity (or an HMAC with the token; a host-to-host
//                        capability peer both) over the transcript, and its UCX worker address
//   server -> welcome    sealed with the session keys: limits, its own proof, its UCX worker address
//
// Only then do the two UCX workers connect, each creating an endpoint from
// the other's worker address; no byte from an unauthenticated peer reaches UCX.
//
// Reverse connections (a GPU host behind NAT): ferryd opens the TCP
// connection (connect_out, `ferryd --connect`) to a client runtime that
// listens with this same class in the client's part; the messages, their
// order and who proves what stay as above.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/known_hosts.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::transport {

class Worker;

// Who came in, once authenticated.
struct Peer {
  std::string address;   // "ip:port"
  std::string client;    // the name it gave, control characters escaped (ferry::printable)
  std::string key_name;  // its name in the authorized keys; "token" when it used the shared token
  std::optional<PublicKey> key;  // none in token mode
  bool encrypted = false;
  Cipher cipher = Cipher::xchacha20poly1305;
  bool dialled_out = false;  // ferryd opened the connection (connect_out), to `address`
  bool shared_memory = false;  // its messages travel on a shared-memory lane (same host, same user)
  bool bulk_lanes = false;     // payloads travel on an endpoint per direction (protocol::Lane::bulk)
  // A capability peer (another ferryd fetching what a client granted): it
  // signed in with the capability's secret as the token; the id it named.
  std::optional<std::uint64_t> capability;
  // And the host key it signed with (its grant's reader): a claim of
  // another capability on this connection must name the same reader.
  std::optional<PublicKey> reader;
  // The handshake's transcript digest, the same at both ends and no other
  // connection's: a later proof on this connection (a claim) is made over it.
  Nonce binding{};
};

// The client name a capability peer gives in hello: "capability:" and the
// id in decimal. Parsed back by capability_of (nothing when not one).
inline constexpr std::string_view capability_prefix = "capability:";
std::string capability_client(std::uint64_t id);
std::optional<std::uint64_t> capability_of(std::string_view client);

// What a capability peer sends to hold one more capability on a connection
// it signed in on (protocol::Claim): HMAC-SHA-256 keyed with the
// capability's secret over the connection's binding and the id. The secret
// never crosses the wire, and the proof is good on that connection only.
Mac claim_mac(std::string_view secret, const Nonce& binding, std::uint64_t capability);
bool verify_claim(std::string_view secret, const Nonce& binding, std::uint64_t capability, const Mac& mac);

struct DialOptions;
struct Dialed;

// Why the front door closed a handshake, as a metric's label and an audit
// field: a few fixed names, so that no peer can grow their number.
enum class Refusal : std::uint8_t {
  wrong_token,        // the token, or a capability's secret, is not the one expected
  unknown_key,        // a key not authorized, a signature that does not verify, a host key refused
  version_mismatch,
  handshake_timeout,  // the handshake did not finish within the deadline
  hung_up,            // the peer closed its end first
  malformed,          // not a Ferry peer, or a broken one
  rate_limited,       // its address opened more connections than its rate allows
  busy,               // made room for a newer handshake (the most in progress, all or from its address)
  internal,           // this end could not admit an authenticated peer
};
const char* to_string(Refusal reason) noexcept;

// What a capability peer must prove: that it knows the secret, and that it
// holds the private half of `reader` (the ferryd the client named).
struct CapabilityKeys {
  std::string secret;
  PublicKey reader{};
};

class BootstrapServer {
 public:
  struct Options {
    std::string host;
    std::uint16_t port = 0;  // 0: any free port (see port())
    std::string token;       // empty: the token is not accepted
    // The name of an authorized key, or none; thread-safe (runs on the
    // bootstrap thread). Null: keys are not accepted.
    std::function<std::optional<std::string>(const PublicKey&)> authorize;
    std::optional<KeyPair> host_key;  // none: an ephemeral one (clients cannot pin it across restarts)
    std::chrono::milliseconds deadline{10000};  // for the whole handshake
    // Handshakes in progress, in all and from one IP address. Past either,
    // a new connection makes room by closing the oldest handshake that has
    // not authenticated (from that address, or from the address holding the
    // most): a flood of silent sockets then only pushes out its own, and a
    // real client, whose handshake takes milliseconds, gets through.
    std::size_t max_pending = 128;
    std::size_t max_pending_per_address = 16;
    double per_address_rate = 20;               // connections per second one IP address may open, sustained
    double per_address_burst = 60;
    bool allow_plaintext = false;   // --plaintext: a client that asks for plaintext gets it
    bool encrypt_loopback = false;  // seal loopback links too
    // Host-to-host transfers: a capability a client granted (the secret its
    // peer signs in with, as a token, and the host key it must sign with
    // too), or none when it is unknown, expired or used. Thread-safe (the
    // bootstrap thread calls it). Null: capability peers are refused.
    std::function<std::optional<CapabilityKeys>(std::uint64_t capability)> capability_keys;
  };
  // Progress thread: an authenticated peer and its connection (handlers not
  // yet set). Returns the welcome to send (the bootstrap fills in its proof
  // and addresses), or an error message to refuse with (the connection is
  // then closed).
  using AcceptHandler = std::function<protocol::Message(const Peer&, std::shared_ptr<Connection>)>;
  // Bootstrap thread: a peer that did not get in, the name it gave (empty
  // before its hello; control characters escaped), and why: as one of a few
  // names (metrics) and in words (the audit log).
  using RefusedHandler = std::function<void(const std::string& address, const std::string& client, Refusal reason,
                                            const std::string& why)>;

  // Progress thread: a ferryd that dialled in, authenticated both ways; its
  // connection's handlers are to be set here (set_handlers).
  using DialedHandler = std::function<void(Dialed)>;
  // Bootstrap thread: how a connection opened by connect_out ended; empty
  // once the peer was admitted, else why not.
  using Outcome = std::function<void(const std::string& failure)>;

  // Listens at once; throws Error naming the address when it cannot.
  BootstrapServer(std::shared_ptr<Worker> worker, Options options, AcceptHandler on_accept,
                  RefusedHandler on_refused = {});
  // Listens for ferryd hosts that dial out, and plays the client's part on
  // each socket it accepts, with the same deadline, rate limit and cap on
  // handshakes in progress; options' token, authorize and host key are unused.
  BootstrapServer(std::shared_ptr<Worker> worker, Options options, DialOptions client, DialedHandler on_dialed,
                  RefusedHandler on_refused = {});
  ~BootstrapServer();  // stops the thread; closes handshakes in progress
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  std::uint16_t port() const noexcept;
  const PublicKey& host_key() const noexcept;
  // Stops accepting; thread-safe, idempotent.
  void stop();
  // ferryd's part on a connection it opens itself: to a client listening at
  // host:port. Returns at once (the handshake runs on the bootstrap thread
  // under the same deadline); `outcome` is always called once, unless this
  // throws Error (the address cannot be used at all, or the bootstrap
  // stopped). Returns the address as Peer::address will give it.
  std::string connect_out(const std::string& host, std::uint16_t port, Outcome outcome);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct DialOptions {
  std::string client;                 // a name for the server's logs
  // Sign in with the token, or with a key (ferry keygen); a capability
  // peer (client capability_client(id)) gives both: the capability's secret
  // and its host key.
  std::string token;
  std::optional<KeyPair> identity;
  std::filesystem::path known_hosts;  // pins of host keys; empty: none checked
  Pinning pinning = Pinning::trust_on_first_use;
  protocol::Privacy privacy = protocol::Privacy::automatic;
  std::chrono::milliseconds timeout{20000};
  // Set by another thread: the handshake gives up within 100 ms (a runtime
  // shutting down must not wait out the timeout on a host that accepted the
  // connection and then went silent: stopped, hung, cut off).
  const std::atomic<bool>* cancel = nullptr;
  // Offer a shared-memory lane when the server is a process of this user
  // on this host (docs/protocol.md). A ferryd fetching from another ferryd
  // does not: a lane has no peer error handling, and a source killed
  // mid-transfer was seen to stall the fetching ferryd's worker.
  bool shared_memory_lane = true;
  // A listener for ferryd hosts (reverse connections): a reason to turn a
  // host away once its host key is proven, before any UCX endpoint exists;
  // empty lets it in. Called on the bootstrap thread. (Closing a connection
  // whose endpoints were still wiring up could abort UCX 1.13 on either side.)
  std::function<std::string(const PublicKey& host_key)> turn_away;
};

// The server answered and said no, or answered what cannot be trusted (a
// host key that is not the pinned one...): `status` says which, so a caller
// can tell a refusal that retrying cannot fix from one that it may.
struct DialRefused : RemoteError {
  DialRefused(protocol::Status why, const std::string& what) : RemoteError(what), status(why) {}
  protocol::Status status;
};

// The listener's own choice (DialOptions::turn_away), not a failure.
struct TurnedAway : DialRefused {
  using DialRefused::DialRefused;
};

// The host name does not resolve (getaddrinfo says no such name): a typo or
// a host that was never in DNS, which the next try would find the same. A
// resolver that is merely unavailable (EAI_AGAIN) is a plain UcxError,
// which callers may retry.
struct Unresolvable : UcxError {
  using UcxError::UcxError;
};

struct Dialed {
  std::shared_ptr<Connection> connection;
  protocol::Welcome welcome;
  PublicKey host_key{};
  Cipher cipher = Cipher::xchacha20poly1305;
  Nonce binding{};  // as Peer::binding: what claims on this connection are made over
};

// Connects, authenticates both ways and creates the UCX endpoint. Throws
// DialRefused saying why the server refused (or was refused: a host key
// that is not the pinned one, a server without the token, an unencrypted
// link nobody asked for), Unresolvable when the host name names nothing,
// UcxError/Error when it cannot be reached.
Dialed dial(const std::shared_ptr<Worker>& worker, const std::string& host, std::uint16_t port,
            const DialOptions& options, Connection::MessageHandler on_message, Connection::ErrorHandler on_error);

// 127.0.0.0/8, ::1 or ::ffff:127.x: a peer on this very host.
bool is_loopback(const std::string& ip);

}  // namespace ferry::transport
