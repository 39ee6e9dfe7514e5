// A host that stops answering while its connection stays up: a ferryd
// stopped (SIGSTOP, a debugger, a VM paused), hung, or behind a partition
// that drops its packets. UCX notices a closed socket within milliseconds
// (a process killed, its host's kernel answering with a reset), but keeps
// a TCP connection to a stopped process open for good: the kernel still
// acknowledges its bytes, and UCX's keepalive rides on them. Every request
// on such a host used to wait for it, and so did the program.
//
// So, with a liveness limit: while requests wait on the host, and nothing
// came from it for half the limit, a ping goes out (ferryd answers pings on
// its progress thread, beside kernels that run for minutes); nothing for the
// whole limit, and nothing for half of it since the ping, and the host is
// lost as if its connection had failed: its work is placed again, its data recomputed from lineage, and
// the reconnect loop dials it afresh, so a host that comes back starts a
// new connection, trusted only for what it is sent from then on. A host
// nothing waits on is never judged: its silence costs nothing. Nor is the
// time this process could not listen (LivenessJudge): on a loaded machine
// a client whose own progress thread was held up, or which was not
// scheduled, once dropped hosts that had answered long before.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>

#include "ferry/heap_trim.hpp"
#include "devices/remote/liveness_judge.hpp"
#include "devices/remote/remote_device.hpp"

namespace ferry::detail {

namespace {
std::int64_t now_ticks() noexcept { return std::chrono::steady_clock::now().time_since_epoch().count(); }
}  // namespace

void RemoteDevice::heard_from() noexcept { last_heard_.store(now_ticks(), std::memory_order_relaxed); }

void RemoteDevice::watch_liveness() {
  using std::chrono::steady_clock;
  const auto limit = std::chrono::duration_cast<steady_clock::duration>(options_.liveness);
  const auto tick = std::max(limit / 8, steady_clock::duration(std::chrono::milliseconds(5)));
  LivenessJudge judge(limit);
  std::optional<std::future<protocol::Message>> ping;  // the one out, unanswered
  std::uint64_t ping_epoch = 0;
  steady_clock::time_point ping_sent;
  std::unique_lock lock(liveness_mutex_);
  while (!stopping_.load()) {
    const auto due = steady_clock::now() + tick;
    liveness_cv_.wait_for(lock, tick, [&] { return stopping_.load(); });
    if (stopping_.load()) return;
    HeapTrim::global().tick();  // this thread ticks anyway
    const auto now = steady_clock::now();
    const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
    // Answered, or failed with its connection; one of another connection is forgotten.
    if (ping && (ping_epoch != epoch || ping->wait_for(std::chrono::seconds(0)) == std::future_status::ready))
      ping.reset();
    if (!alive()) continue;
    const steady_clock::time_point heard{steady_clock::duration(last_heard_.load())};
    // Nothing waits on it but the ping: neither this runtime's requests nor
    // another host's move out of it (host_to_host.cpp).
    const bool waiting = requests_.waiting() + static_cast<std::size_t>(lent_.load()) > (ping ? 1u : 0u);
    const auto worker = connection_worker();
    const auto verdict = judge.judge(now, heard, waiting, ping ? &ping_sent : nullptr,
                                     worker ? worker->held_up() : std::chrono::nanoseconds::zero(),
                                     std::max(now - due, steady_clock::duration::zero()));
    if (verdict == LivenessJudge::Verdict::ping) {
      const std::uint64_t id = requests_.next_id();
      ping = requests_.request(id, protocol::Ping{id}, nullptr, 0);
      ping_epoch = epoch;
      ping_sent = now;
    }
    if (verdict != LivenessJudge::Verdict::lost) continue;
    lock.unlock();
    lost(fmt::format("not heard from in {} ms while requests waited on it (the liveness limit, "
                     "FERRY_REMOTE_LIVENESS)",
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - heard).count()));
    lock.lock();
    ping.reset();
  }
}

}  // namespace ferry::detail
