// Ferry's wire protocol between a runtime (client) and ferryd (server),
// written down in docs/protocol.md. Every message is a control header sent
// as a UCX active-message header, optionally followed by a bulk payload (the
// AM data, moved by UCX eagerly or by rendezvous). Headers are versioned,
// little-endian and length-checked; decode() validates every field before
// anything uses it and throws ProtocolError naming what was wrong.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ferry/dtype.hpp"

namespace ferry::protocol {

inline constexpr std::uint32_t magic = 0x59525246;  // "FRRY" as little-endian bytes
inline constexpr std::uint16_t version = 1;         // the newest version this build speaks
inline constexpr std::uint16_t oldest_version = 1;  // the oldest it still accepts

// Bounds a decoder enforces; a header or field beyond them is malformed.
// A header travels as a UCX active-message header, which UCX 1.13 caps near
// 8 KiB on its transports here: stay below that.
inline constexpr std::size_t max_header_bytes = 8000;
inline constexpr std::size_t max_string_bytes = 1024;
inline constexpr std::size_t max_args = 64;
inline constexpr std::uint64_t max_buffer_bytes = std::uint64_t{1} << 40;  // 1 TiB
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t mac_bytes = 32;  // HMAC-SHA-256 (libsodium crypto_auth_hmacsha256)
inline constexpr std::uint32_t max_source_bytes = 1u << 20;  // a define_kernel's CUDA source (its payload)
inline constexpr std::size_t key_bytes = 32;         // an X25519 or Ed25519 public key
inline constexpr std::size_t signature_bytes = 64;   // Ed25519
inline constexpr std::size_t max_address_bytes = 4096;  // a UCX worker address
inline constexpr std::size_t max_names = 512;  // welcome's kernel and device lists (the header bound still applies)
inline constexpr std::size_t max_after = 256;  // a run's predecessors on the same connection
inline constexpr std::size_t secret_bytes = 32;  // a capability's secret (host-to-host transfers)
inline constexpr std::uint32_t max_grant_ms = 600'000;  // a grant lives at most 10 minutes

enum class Type : std::uint16_t {
  hello = 1,   // client -> server: first message
  challenge,   // server -> client: nonce to authenticate with
  auth,        // client -> server: HMAC(token, nonce || client name)
  welcome,     // server -> client: authenticated; what the server offers
  put,         // client -> server: a chunk of a replica's contents (payload)
  put_ack,     // server -> client: that chunk is stored
  get,         // client -> server: send back part of a replica
  data,        // server -> client: the part asked for (payload)
  run,         // client -> server: run a kernel on replicas
  done,        // server -> client: a run finished (or could not)
  free,        // client -> server: drop a replica
  stats,       // client -> server: ask for counters
  stats_reply, // server -> client: counters
  ping,        // either way: liveness and round-trip time
  pong,
  error,       // server -> client: a fatal error; the server closes the connection
  bye,         // either way: orderly close (a server going down says why)
  define_kernel,  // client -> server: a kernel from CUDA source (payload) for this connection; answered by done
  grant,       // client -> server: let a capability peer read part of a replica; answered by put_ack
  fetch,       // client -> server: pull part of a replica from another ferryd (with a grant); answered by put_ack
  claim,       // capability peer -> server: hold one more capability on this connection; answered by put_ack
};
const char* to_string(Type type) noexcept;

// Why something failed, in done / put_ack / error messages.
enum class Status : std::uint16_t {
  ok = 0,
  kernel_failed,     // the kernel threw: message has its text
  unknown_kernel,
  bad_arguments,     // arguments did not fit the kernel
  unknown_buffer,    // a replica id the server does not hold
  quota_exceeded,    // the client's memory quota would be exceeded
  out_of_memory,
  shutting_down,     // the server is stopping; the work was not done
  auth_failed,
  version_mismatch,
  malformed,         // the peer sent something undecodable
  out_of_order,      // a valid message at the wrong time (e.g. run before auth)
  internal,
  busy,              // the front door is full or the peer connects too often: try again shortly
};
const char* to_string(Status status) noexcept;

using DType = ferry::DType;  // sent as the enumerator's value (ferry/dtype.hpp)
enum class Mode : std::uint8_t { read = 0, write, readwrite };    // same order as ferry::AccessMode

using Key = std::array<std::uint8_t, key_bytes>;
using Signature = std::array<std::uint8_t, signature_bytes>;
using Bytes = std::vector<std::uint8_t>;  // at most max_address_bytes

// What a client lets the link be: encrypted unless both ends allow plaintext.
enum class Privacy : std::uint8_t {
  automatic = 0,  // plaintext allowed on loopback only
  encrypt,        // encrypted even on loopback
  plaintext,      // plaintext allowed (FERRY_PLAINTEXT): a trusted fabric
};

// The handshake messages (hello, challenge, auth, welcome, and an error
// refusing) travel on the bootstrap socket, never over UCX.
// What carries a connection's messages besides the control endpoint. A
// shared-memory lane is a second UCX endpoint, made from the peer's whole
// address where the control endpoint is made from its network address
// (auth and welcome), offered only between processes of one user on one
// host; liveness stays with the control endpoint, on TCP. Bulk lanes, offered where shared memory is not: two
// more endpoints with peer error handling, each carrying one end's messages
// that have a payload, so that neither direction's control messages (UCX's
// rendezvous replies, Ferry's acks and requests) queue behind the other
// direction's bulk data in one TCP stream. Added after version 1 shipped: a
// trailing byte that an older peer leaves out, which reads as `none`.
enum class Lane : std::uint8_t { none = 0, shared_memory = 1, bulk = 2 };

// The sender's process id, sent with a shared-memory lane only: the peer,
// once it checked that this process owns the other end of the bootstrap
// socket and that it can read this process's memory, copies the payloads
// this end sends straight out of it (process_vm_readv; docs/protocol.md,
// "Pulled payloads"). Added after the lane: a trailing u32 that follows the
// lane byte, left out when 0.
struct ProcessId {
  std::uint32_t value = 0;
  friend bool operator==(const ProcessId&, const ProcessId&) = default;
};

struct Hello {
  std::uint16_t min_version = oldest_version;
  std::uint16_t max_version = version;
  std::string client;  // a name for logs, e.g. "host:pid"
  Privacy privacy = Privacy::automatic;
  Key exchange{};   // the client's ephemeral X25519 public key (crypto_kx)
  Key identity{};   // the client's Ed25519 public key; all zero: the shared token instead
  std::uint8_t aes_gcm = 0;  // 1: the client can seal with AES-256-GCM (its CPU has AES-NI)
  Lane lane = Lane::none;    // what the client offers
  ProcessId pid{};           // with lane == shared_memory: this client's process
};

struct Challenge {
  std::uint16_t version = protocol::version;  // the version the server chose
  std::array<std::uint8_t, nonce_bytes> nonce{};
  Key exchange{};       // the server's ephemeral X25519 public key
  Key host_key{};       // the server's Ed25519 public key, which clients pin
  std::uint8_t cipher = 0;  // what seals from here on: 0 AES-256-GCM, 1 XChaCha20-Poly1305
  Signature signature{};  // by host_key, over the hello and this message's other fields
  // When the hello offered a shared-memory lane and this end takes it: the
  // server's process (last: optional). Here rather than in the welcome: the
  // client checks it against the bootstrap socket, which the server keeps
  // open only until the welcome.
  ProcessId pid{};
};

// A UCX worker's address of its network transports alone
// (Worker::network_address), beside the whole one. Added after version 1
// shipped: a trailing field, left out when empty, which an auth ends with
// and a welcome writes only after a lane byte.
struct NetworkAddress {
  Bytes bytes;
  friend bool operator==(const NetworkAddress&, const NetworkAddress&) = default;
};

struct Auth {
  std::array<std::uint8_t, mac_bytes> mac{};  // token mode: HMAC over the transcript
  Signature signature{};                      // key mode: by the hello's identity, over the transcript
  Bytes worker_address{};                     // the client's UCX worker
  NetworkAddress network_address{};           // the same worker's, network transports alone
};

struct Welcome {
  std::string server;               // name and version for logs
  std::uint64_t memory_quota = 0;   // bytes this client may keep on the server
  std::uint32_t cpu_workers = 0;
  std::uint32_t gpus = 0;
  std::uint64_t max_payload = 0;    // largest payload the server accepts in one message (chunk bound)
  std::array<std::uint8_t, mac_bytes> mac{};  // token mode: the server's proof that it knows the token too
  std::uint8_t encrypted = 0;       // 1: every later message is sealed (AEAD)
  Bytes worker_address{};           // the server's UCX worker
  // Kernels runs may name (built-ins and plugins), sorted; empty when the
  // list did not fit in the header, and then the client assumes its own.
  std::vector<std::string> kernels{};
  std::vector<std::string> devices{};  // what tasks run on there, one line each, for people
  // What the host's devices are (GPU models, or CPU model and workers), the
  // same for every host alike: clients key their performance models by it.
  std::string device_key{};
  // The peak rates of the host's fastest device, per task (measured by its
  // device probe): the client's first estimates for the host before any
  // run. 0: unknown.
  double peak_flops = 0;
  double peak_bytes = 0;
  Lane lane = Lane::none;  // what both ends use: the client's offer where the server can take it (optional)
  // The server's worker, network transports alone: only after a lane, and
  // only to a client that sent its own (last: optional).
  NetworkAddress network_address{};
};

// A replica is a row-major rows x cols matrix of dtype, identified by a
// client-chosen id. The first put of an id creates it; every put carries the
// shape, which must not change. The payload holds bytes [offset, offset +
// payload) of the packed (ld == cols) contents.
struct Put {
  std::uint64_t request = 0;
  std::uint64_t buffer = 0;
  DType dtype = DType::f32;
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint64_t offset = 0;
};

struct PutAck {
  std::uint64_t request = 0;
  std::uint64_t buffer = 0;
  Status status = Status::ok;
  std::string message;
};

// Which capability a capability peer's get reads under: a connection may
// hold several (claim), and two tenants' buffer ids can coincide. Added
// after version 1 shipped: a trailing u64 that only capability peers
// write; a get that ends before it names none.
struct Under {
  std::optional<std::uint64_t> capability;
  friend bool operator==(const Under&, const Under&) = default;
};

struct Get {
  std::uint64_t request = 0;
  std::uint64_t buffer = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  Under under{};  // {}: designated initializers may leave it out
};

// Answers a get: payload = the bytes asked for (none when status != ok).
struct Data {
  std::uint64_t request = 0;
  std::uint64_t buffer = 0;
  std::uint64_t offset = 0;
  Status status = Status::ok;
  std::string message;
};

struct RunArg {
  enum class Kind : std::uint8_t { buffer = 0, real, integer, text };
  Kind kind = Kind::real;
  std::uint64_t buffer = 0;  // kind buffer
  Mode mode = Mode::read;    // kind buffer
  double real = 0;
  std::int64_t integer = 0;
  std::string text;
};

struct Run {
  std::uint64_t request = 0;
  std::string kernel;
  std::string task;  // the task's name, for the server's logs and errors
  std::vector<RunArg> args;
  // Earlier runs of this connection (by request) that this one waits for: a
  // run forwarded before they finished. Optional on the wire (absent: none),
  // at most max_after.
  std::vector<std::uint64_t> after{};  // {}: designated initializers may leave it out
};

struct Done {
  std::uint64_t request = 0;
  Status status = Status::ok;
  double seconds = 0;                 // kernel time on the server
  std::optional<double> result;       // scalar result
  std::string message;                // error text when status != ok
};

struct Free {
  std::uint64_t buffer = 0;
};

struct StatsRequest {
  std::uint64_t request = 0;
};

struct StatsReply {
  std::uint64_t request = 0;
  std::uint64_t bytes_in = 0;    // payload bytes received from this client
  std::uint64_t bytes_out = 0;   // payload bytes sent to this client
  std::uint64_t tasks = 0;       // runs completed for this client
  std::uint64_t replicas = 0;    // replicas held for this client now
  std::uint64_t memory_in_use = 0;
};

struct Ping {
  std::uint64_t request = 0;
};
struct Pong {
  std::uint64_t request = 0;
};

struct ErrorMessage {
  Status status = Status::internal;
  std::string message;
};

struct Bye {
  Status status = Status::ok;
  std::string message;
};

// Defines a kernel from CUDA C++ source for the rest of this connection;
// runs then name it. The payload is the source, exactly source_bytes long.
// Answered by a done with the same request: ok, or bad_arguments with why.
struct DefineKernel {
  std::uint64_t request = 0;
  std::string name;                  // what runs call it
  std::string entry;                 // the __global__ function in the source
  std::vector<std::string> options;  // NVRTC options; at most max_args
  std::vector<std::string> writes;   // pointer parameters the kernel only writes; at most max_args
  std::uint32_t source_bytes = 0;    // at most max_source_bytes
};

using Secret = std::array<std::uint8_t, secret_bytes>;

// Host-to-host transfers (docs/protocol.md). The owner of a replica on host
// A lets one peer read [offset, offset + length) of it: the peer signs in at
// A's bootstrap in token mode with `secret` as the token and
// "capability:<capability>" as its client name, and may then only get bytes
// of that region. Answered by a put_ack (request, buffer).
struct GrantRead {
  std::uint64_t request = 0;
  std::uint64_t capability = 0;  // client-chosen id, unique on the host
  Secret secret{};               // the token the peer signs in with
  // The one peer it is for: the host key of the ferryd the client will
  // tell to fetch (as the client pinned it). That peer signs in with this
  // key and the secret; anyone else is refused, even holding the secret.
  Key reader{};
  std::uint64_t buffer = 0;      // the owner's replica on this host
  std::uint64_t offset = 0;
  std::uint64_t length = 0;      // > 0
  std::uint32_t lifetime_ms = 0; // 1 .. max_grant_ms: the capability is gone after that
};

// Tells host B to pull bytes of a replica from host A (which granted them)
// into [offset, offset + length) of its replica `buffer` (created with the
// shape, as by a put). B dials `source` ("host:port"), checks that A's host
// key is `host_key`, and answers with a put_ack once the bytes are stored.
struct Fetch {
  std::uint64_t request = 0;
  std::uint64_t buffer = 0;  // B's replica
  DType dtype = DType::f32;
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint64_t offset = 0;  // in B's replica
  std::uint64_t length = 0;  // > 0
  std::string source;        // A's bootstrap address, "host:port"
  Key host_key{};            // A's host key, as the client pinned it
  std::uint64_t capability = 0;
  Secret secret{};
  std::uint64_t source_buffer = 0;  // the replica on A
  std::uint64_t source_offset = 0;
};

// A capability peer, signed in with one capability, holds one more on the
// same connection (host-to-host transfers reuse one connection per pair of
// hosts): it proves it knows that capability's secret without sending it,
// bound to this connection (transport::claim_mac over the handshake's
// transcript digest). Answered by a put_ack (request, buffer = the
// capability): ok, or auth_failed saying why.
struct Claim {
  std::uint64_t request = 0;
  std::uint64_t capability = 0;
  std::array<std::uint8_t, mac_bytes> mac{};
};

using Message = std::variant<Hello, Challenge, Auth, Welcome, Put, PutAck, Get, Data, Run, Done, Free, StatsRequest,
                             StatsReply, Ping, Pong, ErrorMessage, Bye, DefineKernel, GrantRead, Fetch, Claim>;

Type type_of(const Message& message) noexcept;

// The header bytes of a message: a fixed frame (magic u32, version u16,
// type u16, body length u32) then the body.
std::vector<std::byte> encode(const Message& message);
// A run, without copying it into a Message first (the hot path of a remote task).
std::vector<std::byte> encode(const Run& run);

// Throws ferry::ProtocolError for anything malformed: short or long input,
// wrong magic, unknown type or enum value, a length beyond its bound, trailing bytes.
Message decode(std::span<const std::byte> header);

}  // namespace ferry::protocol
