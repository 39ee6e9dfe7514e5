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

TEST(LivenessJudge, SilenceWhileThisProcesssProgressWasHeldUpIsNotTheHosts) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 500ms;
  // The progress thread has been inside one callback for 900 ms: the pong
  // may be waiting unread.
  EXPECT_EQ(judge.judge(t0 + 1100ms, t0, true, &ping, 900ms, 0ms), Verdict::fine);
  // It came back round; the host gets the limit again from then, and the
  // ping half of it.
  EXPECT_EQ(judge.judge(t0 + 1600ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 2000ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 2100ms, t0, true, &ping, 0ms, 0ms), Verdict::lost);
}

TEST(LivenessJudge, SilenceWhileThisProcessWasNotScheduledIsNotTheHosts) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 500ms;
  // This tick came 1.2 s late (the process descheduled on a loaded machine).
  EXPECT_EQ(judge.judge(t0 + 1900ms, t0, true, &ping, 0ms, 1200ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 2800ms, t0, true, &ping, 0ms, 0ms), Verdict::fine);
  EXPECT_EQ(judge.judge(t0 + 2900ms, t0, true, &ping, 0ms, 0ms), Verdict::lost);
}

TEST(LivenessJudge, ShortHoldUpsAndLateTicksCountAgainstTheHost) {
  LivenessJudge judge(limit);
  const Clock::time_point ping = t0 + 500ms;
  // A quarter of the limit at most: ordinary scheduling, not deafness.
  EXPECT_EQ(judge.judge(t0 + 1000ms, t0, true, &ping, 200ms, 200ms), Verdict::lost);
}

}  // namespace
}  // namespace ferry::detail
