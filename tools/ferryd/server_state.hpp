// What every session of one ferryd shares: the runtime that runs the tasks,
// the limits, the metrics and the memory all clients hold together.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "ferry/runtime/runtime.hpp"
#include "audit.hpp"
#include "background.hpp"
#include "capabilities.hpp"
#include "fair_share.hpp"
#include "ferry/transport/worker.hpp"
#include "gpu_health.hpp"
#include "metrics.hpp"
#include "peer_fetch.hpp"

namespace ferry::ferryd {

struct Limits {
  std::uint64_t client_quota = 0;  // one client's replicas
  std::uint64_t memory_limit = 0;  // every client's replicas together
  std::uint64_t max_payload = 64ull << 20;  // one message's payload: bounds what a single put can make us receive
  // A connection that has not authenticated by then is closed, so idle or
  // stalled peers cannot pile up on the bootstrap socket.
  std::chrono::milliseconds handshake_timeout{10000};
  // How long NVRTC may take for one client's kernel definition (--compile-limit).
  std::chrono::milliseconds compile_limit = default_compile_limit;
};

struct ServerState {
  std::shared_ptr<transport::Worker> worker;
  Runtime& runtime;
  Metrics& metrics;
  std::string name;  // "ferryd <version>", sent in welcome
  std::uint32_t cpu_workers = 0;
  Limits limits;
  std::uint32_t gpus = 0;  // the runtime's CUDA devices at start
  std::vector<int> gpu_ordinals{};  // theirs: what a client's CUDA source is compiled for
  std::unordered_set<std::string> plugin_kernels{};  // kernels --plugin libraries added
  // Reported in welcome: the kernels runs may name, and the devices they
  // run on (offer(): those still up).
  std::vector<std::string> kernels{};
  struct OfferedDevice {
    std::string name;         // the runtime's: "cpu", "cuda:0"
    std::string description;  // for people
    std::string key;          // for clients' performance models
    DevicePeak peak;          // its device probe's
  };
  std::vector<OfferedDevice> devices{};
  // The GPUs a sticky CUDA error took down are offered no more; shared with
  // the metrics port's probes and with task continuations.
  std::shared_ptr<GpuHealth> gpu_health = std::make_shared<GpuHealth>();

  std::uint32_t gpus_up() const { return gpus - std::min(gpus, gpu_health->down()); }
  // Where a client's task runs: a client sends a task here to have it on a
  // GPU, so one with a CUDA variant goes to this host's GPUs when there are
  // any up; everything else runs on the CPU workers. With every GPU down, a
  // kernel that runs only on a GPU still asks for one: the runtime's
  // refusal then names the GPU and why it is down.
  Place place_for(const KernelDef& kernel) const {
    return gpus > 0 && kernel.cuda && (gpus_up() > 0 || !kernel.cpu) ? gpu() : cpu();
  }

  // Which client's run gets the next free lane. Shared with task
  // continuations, which give their lane back even after their session ended.
  std::shared_ptr<FairShare> fair = std::make_shared<FairShare>(0, 0);

  // Progress thread only.
  std::uint64_t memory_in_use = 0;
  bool shutting_down = false;
  // Each client's compiles of CUDA source (by share key): kept after its
  // connections close, so a client that reconnects still counts the
  // compiles that overran and still run. One per key or token client name.
  std::map<std::string, std::shared_ptr<CompileBudget>> compile_budgets{};

  // Off unless --audit-log; shared with task continuations, which may outlive a session.
  std::shared_ptr<AuditLog> audit = std::make_shared<AuditLog>();
  // What clients granted other ferryd hosts to read (the bootstrap thread
  // asks it for secrets), and the fetches this host runs from others; made
  // at the first fetch.
  std::shared_ptr<Capabilities> capabilities = std::make_shared<Capabilities>();
  std::shared_ptr<PeerFetches> fetches{};
  // This host's key (set when it listens): its fetches from other hosts sign with it.
  std::optional<transport::KeyPair> host_key{};

  // Last, so it stops first: its jobs post to the worker and read nothing else here.
  Background background{};
};

}  // namespace ferry::ferryd
