#include "fair_share.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace ferry::ferryd {

namespace {

// What a client's first run is charged before any of its runs was measured:
// corrected by what it really took when it finishes.
constexpr double first_guess_seconds = 1e-3;
// Weight of a new run time in a client's mean: its kernels change over time.
constexpr double mean_weight = 0.25;

}  // namespace

const char* to_string(LaneKind kind) noexcept { return kind == LaneKind::cpu ? "cpu" : "gpu"; }

FairShare::FairShare(std::size_t cpu_lanes, std::size_t gpu_lanes, Changed on_changed)
    : on_changed_(std::move(on_changed)) {
  pool(LaneKind::cpu).lanes = cpu_lanes;
  pool(LaneKind::gpu).lanes = gpu_lanes;
}

void FairShare::submit(const std::string& client, double weight, LaneKind lane, Start start) {
  Pool& p = pool(lane);
  auto [it, added] = p.clients.try_emplace(client);
  Client& c = it->second;
  // One that had nothing waiting or running banks no credit for the time it
  // was away: it starts level with whoever is being served now.
  if (added || (c.queue.empty() && c.running == 0)) c.vtime = std::max(c.vtime, p.vclock);
  c.weight = weight > 0 ? weight : 1;
  c.queue.push_back(std::move(start));
  if (on_changed_) on_changed_(client, queued(client), false);
  dispatch(lane);
}

void FairShare::dispatch(LaneKind lane) {
  Pool& p = pool(lane);
  while (p.lanes == 0 || p.running < p.lanes) {
    auto next = p.clients.end();
    for (auto it = p.clients.begin(); it != p.clients.end(); ++it)
      if (!it->second.queue.empty() && (next == p.clients.end() || it->second.vtime < next->second.vtime)) next = it;
    if (next == p.clients.end()) return;
    Client& c = next->second;
    Start start = std::move(c.queue.front());
    c.queue.pop_front();
    const Ticket ticket{next->first, lane, c.mean_seconds > 0 ? c.mean_seconds : first_guess_seconds};
    p.vclock = c.vtime;
    ++p.running;
    ++c.running;
    c.vtime += ticket.charged / c.weight;
    const bool started = start(ticket);
    if (on_changed_) on_changed_(ticket.client, queued(ticket.client), started);
    if (started) continue;
    --p.running;
    --c.running;
    c.vtime -= ticket.charged / c.weight;
    forget_if_idle(p, next);
  }
}

void FairShare::finished(const Ticket& ticket, double seconds) {
  Pool& p = pool(ticket.lane);
  if (p.running > 0) --p.running;
  if (auto it = p.clients.find(ticket.client); it != p.clients.end()) {
    Client& c = it->second;
    if (c.running > 0) --c.running;
    if (seconds >= 0 && seconds < std::numeric_limits<double>::infinity()) {
      c.vtime += (seconds - ticket.charged) / c.weight;
      c.mean_seconds = c.mean_seconds > 0 ? c.mean_seconds + mean_weight * (seconds - c.mean_seconds) : seconds;
    }
    forget_if_idle(p, it);
  }
  dispatch(ticket.lane);
}

void FairShare::forget_if_idle(Pool& p, std::map<std::string, Client>::iterator it) {
  // Bounded by the clients with work here, not by every client ever seen.
  if (it->second.queue.empty() && it->second.running == 0) p.clients.erase(it);
}

std::size_t FairShare::queued(const std::string& client) const {
  std::size_t n = 0;
  for (const Pool& p : pools_)
    if (auto it = p.clients.find(client); it != p.clients.end()) n += it->second.queue.size();
  return n;
}

}  // namespace ferry::ferryd
