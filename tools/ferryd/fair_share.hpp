// Weighted fair sharing of ferryd's lanes between its clients. Every client
// (an identity: its key's name, or the name a token client gave) has a queue
// per kind of lane (CPU workers, GPU streams); a run reaches the runtime only
// when a lane of its kind is free, and the next one comes from the client
// that has had the least service for its weight (start-time fair queueing:
// each client's virtual time advances by the lane-seconds its runs took over
// its weight). So a client that sends ten times more work than the others
// waits behind its own backlog, not in front of theirs.
//
// Progress thread only: sessions submit, task completions are posted back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

namespace ferry::ferryd {

enum class LaneKind : std::uint8_t { cpu, gpu };
const char* to_string(LaneKind kind) noexcept;

class FairShare {
 public:
  // What a started run holds and gives back when it finishes.
  struct Ticket {
    std::string client;
    LaneKind lane = LaneKind::cpu;
    double charged = 0;  // lane-seconds charged when it started
  };
  // Submits the run to the runtime; false when it did not (refused, or its
  // client left while it waited), and the lane goes to the next run.
  using Start = std::function<bool(const Ticket&)>;
  // A client's queue changed (a run queued, started, or dropped), for the
  // metrics: how many of its runs wait now, and whether one just started.
  using Changed = std::function<void(const std::string& client, std::size_t queued, bool started)>;

  // lanes: how many runs of each kind may be in the runtime at once (its
  // CPU workers, its GPU streams); 0 lanes of a kind: no limit.
  FairShare(std::size_t cpu_lanes, std::size_t gpu_lanes, Changed on_changed = {});

  // Queues a run of `client` (weight > 0); starts it at once if a lane is
  // free and nothing else waits for one.
  void submit(const std::string& client, double weight, LaneKind lane, Start start);
  // A started run finished after `seconds` on its lane: the lane is free again.
  void finished(const Ticket& ticket, double seconds);

  std::size_t queued(const std::string& client) const;

 private:
  struct Client {
    double weight = 1;
    double vtime = 0;             // lane-seconds served over weight
    double mean_seconds = 0;      // of its runs so far (0: none yet)
    std::deque<Start> queue;
    std::size_t running = 0;
  };
  struct Pool {
    std::size_t lanes = 0;
    std::size_t running = 0;
    double vclock = 0;  // the virtual time of the run started last
    std::map<std::string, Client> clients;
  };

  Pool& pool(LaneKind lane) { return pools_[static_cast<std::size_t>(lane)]; }
  const Pool& pool(LaneKind lane) const { return pools_[static_cast<std::size_t>(lane)]; }
  void dispatch(LaneKind lane);
  void forget_if_idle(Pool& pool, std::map<std::string, Client>::iterator it);

  std::array<Pool, 2> pools_;
  Changed on_changed_;
};

}  // namespace ferry::ferryd
