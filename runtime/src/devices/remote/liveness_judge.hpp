// When a connected host's silence makes it lost (liveness.cpp has why):
// the rules alone, on times handed in, so that they are tested without
// stopping processes. RemoteDevice::watch_liveness asks it every tick.
#pragma once

#include <algorithm>
#include <chrono>

namespace ferry::detail {

class LivenessJudge {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Verdict { fine, ping, lost };

  explicit LivenessJudge(Clock::duration limit) : limit_(limit) {}

  // A tick. `heard`: when anything last came from the host; `waiting`:
  // whether anything but the ping waits on it; `ping_sent`: the unanswered
  // ping's time, if one is out; `held_up`: how long this process's
  // progress thread has been inside one round of work (Worker::held_up);
  // `overslept`: how much later than asked this tick came.
  Verdict judge(Clock::time_point now, Clock::time_point heard, bool waiting, const Clock::time_point* ping_sent,
                Clock::duration held_up, Clock::duration overslept) {
    // This process could not listen: a reply that came meanwhile sits
    // unread (its progress thread inside a long callback, the process
    // descheduled on a loaded machine). The silence is counted from when it
    // could listen again, and so is the ping's time to come back.
    if (held_up > limit_ / 4 || overslept > limit_ / 4) deaf_until_ = now;
    const Clock::time_point since = std::max(heard, deaf_until_);
    const auto silent = now - since;
    if (silent < limit_ / 2 || !waiting) return Verdict::fine;
    if (ping_sent == nullptr) return Verdict::ping;
    // A host idle for long is silent for long through no fault of its own:
    // the ping it was just sent gets half the limit to come back.
    if (silent < limit_ || now - std::max(*ping_sent, deaf_until_) < limit_ / 2) return Verdict::fine;
    return Verdict::lost;
  }

 private:
  Clock::duration limit_;
  Clock::time_point deaf_until_{};
};

}  // namespace ferry::detail
