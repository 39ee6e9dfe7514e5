// ferryd's fair share of lanes between clients (tools/ferryd/fair_share.*),
// driven by hand: runs start and finish when the test says, so the order in
// which clients get lanes is exact.
#include "fair_share.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace ferry::ferryd {
namespace {

// Lanes given out, in order, and the tickets of the runs still running.
struct Harness {
  explicit Harness(std::size_t lanes) : share(lanes, 0) {}
  void submit(const std::string& client, double weight, int runs, bool accept = true) {
    for (int i = 0; i < runs; ++i)
      share.submit(client, weight, LaneKind::cpu, [this, accept](const FairShare::Ticket& t) {
        if (!accept) return false;
        started.push_back(t.client);
        running.push_back(t);
        return true;
      });
  }
  // The oldest running run finishes after `seconds`.
  void finish_one(double seconds) {
    const FairShare::Ticket t = running.front();
    running.pop_front();
    share.finished(t, seconds);
  }
  std::map<std::string, int> count(std::size_t from, std::size_t to) const {
    std::map<std::string, int> n;
    for (std::size_t i = from; i < to && i < started.size(); ++i) ++n[started[i]];
    return n;
  }
  FairShare share;
  std::vector<std::string> started;
  std::deque<FairShare::Ticket> running;
};

TEST(FairShare, StartsAtOnceWhileALaneIsFree) {
  Harness h(2);
  h.submit("a", 1, 3);
  EXPECT_EQ(h.started.size(), 2u);
  EXPECT_EQ(h.share.queued("a"), 1u);
  h.finish_one(0.01);
  EXPECT_EQ(h.started.size(), 3u);
  EXPECT_EQ(h.share.queued("a"), 0u);
}

TEST(FairShare, AGreedyClientWaitsBehindItsOwnBacklog) {
  Harness h(2);
  h.submit("greedy", 1, 40);
  h.submit("light", 1, 4);
  while (!h.running.empty()) h.finish_one(0.01);
  ASSERT_EQ(h.started.size(), 44u);
  // After the two greedy runs that found the lanes free, light's four runs
  // go at least every other lane.
  int last_light = 0;
  for (int i = 0; i < 44; ++i)
    if (h.started[i] == "light") last_light = i;
  EXPECT_LE(last_light, 2 + 2 * 4) << "light's last run started at " << last_light;
}

TEST(FairShare, WeightsDivideTheLanes) {
  Harness h(1);
  h.submit("heavy", 3, 40);
  h.submit("plain", 1, 40);
  while (h.started.size() < 41) h.finish_one(0.01);
  const auto n = h.count(1, 41);
  EXPECT_NEAR(n.at("heavy"), 30, 2);
  EXPECT_NEAR(n.at("plain"), 10, 2);
}

TEST(FairShare, LongRunsCostMoreThanShortOnes) {
  // Equal weights, but b's runs take four times as long: a gets about four
  // runs for each of b's, an equal share of lane time.
  Harness h(1);
  h.submit("a", 1, 60);
  h.submit("b", 1, 60);
  while (h.started.size() < 51) h.finish_one(h.running.front().client == "a" ? 0.01 : 0.04);
  const auto n = h.count(11, 51);
  EXPECT_NEAR(n.at("a"), 32, 3);
  EXPECT_NEAR(n.at("b"), 8, 3);
}

TEST(FairShare, AnIdleClientComesBackWithoutBankedCredit) {
  Harness h(1);
  h.submit("busy", 1, 30);
  for (int i = 0; i < 20; ++i) h.finish_one(0.01);
  // 'late' was away while busy ran twenty runs: it does not get twenty in a row now.
  h.submit("late", 1, 20);
  while (h.started.size() < 31) h.finish_one(0.01);
  const auto n = h.count(21, 31);
  EXPECT_LE(n.at("late"), 7);
  EXPECT_GE(n.at("busy"), 3);
}

TEST(FairShare, ARunThatDoesNotStartGivesItsLaneToTheNext) {
  Harness h(1);
  h.submit("gone", 1, 3, /*accept=*/false);
  h.submit("here", 1, 1);
  EXPECT_EQ(h.started, std::vector<std::string>{"here"});
  EXPECT_EQ(h.share.queued("gone"), 0u);
}

}  // namespace
}  // namespace ferry::ferryd
