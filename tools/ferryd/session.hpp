// One authenticated client connection (the bootstrap authenticated it before
// UCX saw a byte of it): which request is allowed when, and the client's
// replicas, runs and counters. Everything
// here runs on the UCX progress thread; task completions are posted back to
// it, so a session needs no lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "authorized_keys.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/user_kernel.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/protocol.hpp"
#include "server_state.hpp"
#include "written_ranges.hpp"

namespace ferry::ferryd {

// A client's buffer on this host. Its host pointer is taken once, when it
// is made, so that storing a payload never waits for the runtime.
//
// What a GPU run writes stays on the GPU (docs/architecture.md, "ferryd's
// replicas"): `host` is read or written directly only while the session
// knows the runtime holds nothing newer elsewhere; otherwise the runtime
// brings the data home first (Session::with_host). The counts below say
// which: GPU runs submitted that used the replica or wrote it, and how many
// of each the host had caught up with when it was last brought home.
struct Replica {
  AnyBuffer buffer;
  std::byte* host = nullptr;
  std::uint64_t bytes = 0;
  protocol::DType dtype = protocol::DType::f32;
  std::uint64_t rows = 0, cols = 0;
  // Set when a task that wrote it failed: its contents are not to be trusted.
  std::string spoiled;
  // Which bytes hold the client's data; the rest is zeroed before anything reads it.
  WrittenRanges written{0};
  std::uint64_t gpu_uses = 0, gpu_writes = 0;
  std::uint64_t uses_home = 0, writes_home = 0;

  // `host` holds the buffer's data: a get may send it as it is.
  bool host_current() const noexcept { return writes_home == gpu_writes; }
  // No GPU holds a copy either: a put may write `host` without leaving one stale.
  bool host_only() const noexcept { return host_current() && uses_home == gpu_uses; }
};

// A reply's message is a protocol string: a long error (an NVRTC log) would
// make the reply unencodable, and the client would wait for it in vain.
std::string clip(std::string text);

class Session : public std::enable_shared_from_this<Session> {
 public:
  using ClosedHandler = std::function<void(Session&)>;
  // `capability_serial`: for a capability peer, the serial of the grant it
  // claimed (Capabilities::claim); it reads that grant and no later one.
  Session(ServerState& server, std::shared_ptr<transport::Connection> connection, const transport::Peer& peer,
          Grant grant, ClosedHandler on_closed, std::uint64_t capability_serial = 0);
  ~Session();

  // Takes the connection's messages from now on.
  void start();
  // Answers every run still in flight with shutting_down, says bye, closes.
  void shut_down(const std::string& why);
  std::string describe() const;  // "peer (client, key name)" for logs
  const Grant& grant() const noexcept { return grant_; }
  // A reload changed its key's options: they apply from the next request
  // on (what it holds stays, even above a smaller quota; its fair-share
  // queue keeps the name it connected with).
  void regrant(Grant grant);
  const std::optional<transport::PublicKey>& key() const noexcept { return key_; }
  std::uint64_t quota() const noexcept { return grant_.quota.value_or(server_.limits.client_quota); }
  // One of this client's replicas, or null (a capability peer reads through it).
  std::shared_ptr<Replica> replica(std::uint64_t id) const;

 private:
  enum class State { ready, closed };
  struct Counters {
    std::uint64_t bytes_in = 0, bytes_out = 0, tasks = 0;
  };
  struct Run {
    std::uint64_t request = 0;
    std::vector<std::uint64_t> written;  // replicas to mark spoiled if the task fails
    std::string kernel;                  // for the metrics' kernel label
    std::uint64_t bytes_in = 0, bytes_out = 0;  // for the audit log
    // Replicas it uses on a GPU, counted there when it reaches the runtime.
    struct GpuUse {
      std::weak_ptr<Replica> replica;
      bool writes = false;
    };
    std::vector<GpuUse> on_gpu;
  };
  // Runs refused before they reached the runtime, by request: a run
  // forwarded behind one of them is refused too (its inputs were never
  // made). Bounded: a client forwards behind runs still in flight.
  struct Refused {
    static constexpr std::size_t keep = 4096;
    std::deque<std::uint64_t> order;
    std::unordered_set<std::uint64_t> ids;
    void add(std::uint64_t id);
  };

  void on_message(transport::Incoming& incoming);
  void dispatch(protocol::Message& message, transport::Incoming& incoming);
  void refuse_while_shutting_down(const protocol::Message& message);

  void on_put(const protocol::Put& put, transport::Incoming& incoming);
  void on_get(const protocol::Get& get);
  // Answers a get from `replica` (which holds the range), once its host
  // bytes are current.
  void send_data(const protocol::Get& get, const std::shared_ptr<Replica>& replica);
  void send_current(const protocol::Get& get, const std::shared_ptr<Replica>& replica);
  // A put into a replica a GPU may hold: the payload lands aside, and goes
  // into `host` once the runtime has brought the data home and dropped the
  // GPU's copy (a partial put keeps the rest of what the GPU wrote).
  void put_staged(const protocol::Put& put, transport::Incoming& incoming, const std::shared_ptr<Replica>& replica);
  // Has the runtime make `replica`'s host bytes current (`for_writing`: and
  // the only copy), on the background thread, which waits for the tasks
  // using the buffer and for the copy home, never the progress thread.
  // `there` runs on that thread right after (null: nothing); `then` runs
  // on the progress thread, with ok or why the data could not come.
  using HostReady = std::function<void(protocol::Status status, const std::string& error)>;
  void with_host(const std::shared_ptr<Replica>& replica, bool for_writing, std::function<void()> there,
                 HostReady then);
  void on_claim(const protocol::Claim& claim);
  // Whether replica `id` may have this shape (an existing one keeps its
  // own; a new one must be possible); else `refusal` says why.
  bool shape_allowed(std::uint64_t id, protocol::DType dtype, std::uint64_t rows, std::uint64_t cols,
                     std::string_view request, std::pair<protocol::Status, std::string>& refusal) const;
  // The client's replica `id` with this shape, made (and charged) if new;
  // null with `refusal` filled in when it cannot be.
  std::shared_ptr<Replica> replica_for(std::uint64_t id, protocol::DType dtype, std::uint64_t rows, std::uint64_t cols,
                                       std::string_view request, std::pair<protocol::Status, std::string>& refusal);
  // ---- host-to-host transfers (session_peer.cpp) ----
  void on_grant(const protocol::GrantRead& grant);
  void on_fetch(const protocol::Fetch& fetch);
  void start_fetch(const protocol::Fetch& fetch, const std::shared_ptr<Replica>& replica);
  void fetched(const protocol::Fetch& fetch, const std::shared_ptr<Replica>& replica, const std::string& error);
  // A capability peer's messages: gets inside its grant, pings, bye.
  void dispatch_capability(protocol::Message& message);
  void on_run(protocol::Run&& run);
  // Called by the fair share when a lane is free for this queued run; false
  // when it did not reach the runtime (refused, or answered already).
  bool start_run(std::uint64_t seq, const protocol::Run& run, const KernelRef& kernel, std::vector<TaskArg>& args,
                 Place place, const FairShare::Ticket& ticket);
  void on_define_kernel(const protocol::DefineKernel& define, transport::Incoming& incoming);
  void kernel_received(const protocol::DefineKernel& define, std::string source, const std::string& error);
  // This client's compile budget (ServerState::compile_budgets), made at first use.
  std::shared_ptr<CompileBudget> compile_budget();
  // Back on the progress thread from the background thread that read the source
  // (and the one that compiled it).
  void kernel_parsed(const protocol::DefineKernel& define, std::shared_ptr<KernelDef> def, protocol::Status status,
                     const std::string& error, std::uint64_t charged);
  void on_free(const protocol::Free& free);
  void on_stats(const protocol::StatsRequest& request);
  void put_stored(const protocol::Put& put, const std::shared_ptr<Replica>& replica, std::uint64_t bytes,
                  const std::string& error);
  void run_finished(std::uint64_t seq, protocol::Done done);

  // Memory this client holds (replicas and kernel sources), against its
  // quota and ferryd's limit. admit() says why `bytes` more cannot be held,
  // or nothing; a quota refusal is audited.
  std::optional<std::pair<protocol::Status, std::string>> admit(std::uint64_t bytes, std::string_view what,
                                                                std::string_view request);
  void charge(std::uint64_t bytes);
  void uncharge(std::uint64_t bytes);
  // An audit record naming this connection.
  void audit(std::string_view event, nlohmann::json fields) const;

  void send(const protocol::Message& message);
  // Sends an error, counts a protocol error, logs and closes.
  void fail(protocol::Status status, const std::string& message);
  // `goodbye`: the client said bye (Connection::close_after_goodbye).
  void close(const std::string& why, bool goodbye = false);
  void release_memory();

  ServerState& server_;
  std::shared_ptr<transport::Connection> connection_;
  ClosedHandler on_closed_;
  const std::string peer_;
  State state_ = State::ready;
  const std::string client_;  // the name it gave in hello
  Grant grant_;  // its key's options: replaced in place on reload (regrant)
  // Who this client is to the fair share, the background reader and the
  // metrics: its key's name, or "token:" and the name a token client gave
  // (a token client cannot take a key's queue); several connections of one
  // identity share a queue.
  const std::string share_key_;
  const std::optional<transport::PublicKey> key_;  // none: it used the shared token
  // Set for another ferryd that signed in with a capability a client
  // granted: the grants this connection holds (the one it signed in with,
  // and those it claimed since), the host key it signed in with, which
  // every grant it holds names as its reader, and the handshake's digest
  // that claims prove their secrets over.
  struct CapabilityPeer {
    std::map<std::uint64_t, std::uint64_t> held;  // capability id -> serial of the grant it took
    transport::PublicKey reader{};
    transport::Nonce binding{};
    std::size_t refused_claims = 0;
  };
  std::optional<CapabilityPeer> capability_peer_;
  // Claims a capability peer may have refused before its connection closes.
  static constexpr std::size_t max_refused_claims = 16;

  std::unordered_map<std::uint64_t, std::shared_ptr<Replica>> replicas_;
  std::uint64_t memory_in_use_ = 0;
  std::unordered_map<std::uint64_t, Run> runs_;  // in flight, by a sequence number of ours (request ids may repeat)
  std::uint64_t next_run_ = 0;
  Refused refused_;
  // Kernels this client defined from CUDA source, by the name its runs use;
  // found before the runtime's, and gone with the connection.
  std::unordered_map<std::string, KernelRef> kernels_;
  Counters counters_;
};

}  // namespace ferry::ferryd
