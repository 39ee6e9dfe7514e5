// LivenessJudge: a host silent while requests wait on it is pinged at half
// the limit and lost at the limit; a host nothing waits on never is; and
// the time this process could not listen (its progress thread held up, or
// the process not scheduled) is not counted against the host.
#include "devices/remote/liveness_judge.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace ferry::detail {
namespace {

using namespace std::chrono_literals;
using Clock = LivenessJudge::Clock;
using Verdict = LivenessJudge::Verdict;

constexpr auto limit = std::chrono::duration_cast<Clock::duration>(1000ms);
const Clock::time_point t0 = Clock::time_point{} + 1000s;

TEST(LivenessJudge, ASilentHostIsPingedAtHalfTheLimitAndLostAtIt) {
  LivenessJudge judge(limit);
  EXPECT_EQ(judge.judge(t0 + 400ms, t0, true, nullptr, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 500ms, t0, true, nullptr, 0ms, 0ms), Verdict::ping);
  const Clock::time_point ping = t0 + 500ms;
  EXPECT_EQ(judge.judge(t0 + 900ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 1000ms, t0, true, &ping, 0ms, 0ms), Verdict::lost);
}

TEST(LivenessJudge, APingSentLateGetsHalfTheLimitToComeBack) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 900ms;  // the host was idle: nothing waited on it before
  EXPECT_EQ(judge.judge(t0 + 1200ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 1400ms, t0, true, &ping, 0ms, 0ms), Verdict::lost);
}

TEST(LivenessJudge, AHostNothingWaitsOnIsNeverLost) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 500ms;
  EXPECT_EQ(judge.judge(t0 + 60s, t0, false, nullptr, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 60s, t0, false, &ping, 0ms, 0ms), Verdict::fine);
}

// The progress thread inside one callback for 900 ms (the pong may be
// waiting unread), or this tick 900 ms late (the process descheduled on a
// loaded machine): either way the host gets the limit again from then, and
// the ping half of it.
TEST(LivenessJudge, SilenceWhileThisProcessCouldNotListenIsNotTheHosts) {
  for (const bool held_up : {true, false}) {
    LivenessJudge judge(limit);
    const Clock::time_point ping = t0 + 500ms;
    const auto deaf = std::chrono::duration_cast<Clock::duration>(900ms);
    EXPECT_EQ(judge.judge(t0 + 1100ms, t0, true, &ping, held_up ? deaf : 0ms, held_up ? 0ms : deaf), Verdict::fine)
        << (held_up ? "held up" : "overslept");
    EXPECT_EQ(judge.judge(t0 + 1600ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
    EXPECT_EQ(judge.judge(t0 + 2000ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
    EXPECT_EQ(judge.judge(t0 + 2100ms, t0, true, &ping, 0ms, 0ms), Verdict::lost);
  }
}

TEST(LivenessJudge, ShortHoldUpsAndLateTicksCountAgainstTheHost) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 500ms;
  // A quarter of the limit at most: ordinary scheduling, not deafness.
  EXPECT_EQ(judge.judge(t0 + 1000ms, t0, true, &ping, 200ms, 200ms), Verdict::lost);
}

}  // namespace
}  // namespace ferry::detail
