// HeapTrim: after a burst (a recovery, a session), once it has been quiet for HeapTrim::quiet,
// the heap's free pages go back, once per burst; and glibc's heap really
// keeps what large temporaries freed until then.
#include "ferry/heap_trim.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "../support/proc_status.hpp"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using Clock = HeapTrim::Clock;
const Clock::time_point t0 = Clock::time_point{} + 1000s;

TEST(HeapTrim, NothingToGiveBackWithoutARecovery) {
  int trims = 0;
  HeapTrim trim([&] { ++trims; });
  EXPECT_FALSE(trim.tick(t0));
  EXPECT_FALSE(trim.tick(t0 + 10s));
  EXPECT_EQ(trims, 0);
}

TEST(HeapTrim, OnceARecoveryHasBeenQuietOncePerBurst) {
  int trims = 0;
  HeapTrim trim([&] { ++trims; });
  trim.released(t0);
  trim.released(t0 + 800ms);  // still recovering: the quiet starts again
  EXPECT_FALSE(trim.tick(t0 + 1200ms));
  EXPECT_EQ(trims, 0);
  EXPECT_TRUE(trim.tick(t0 + 1800ms));
  EXPECT_FALSE(trim.tick(t0 + 5s)) << "trimmed twice for one burst";
  EXPECT_EQ(trims, 1);
  trim.released(t0 + 6s);  // the next fault
  EXPECT_TRUE(trim.tick(t0 + 7s));
  EXPECT_EQ(trims, 2);
  EXPECT_EQ(trim.trims(), 2u);
}

// Sessions that end every half second never leave a quiet second: the
// trim still comes, `patience` after the first, and the next burst starts
// its own count.
TEST(HeapTrim, ABurstThatNeverGoesQuietIsTrimmedAfterPatience) {
  int trims = 0;
  HeapTrim trim([&] { ++trims; });
  auto t = t0;
  for (; t < t0 + HeapTrim::patience; t += 500ms) {
    trim.released(t);
    EXPECT_FALSE(trim.tick(t + 400ms)) << "trimmed " << (t - t0) / 1ms << " ms into the burst";
  }
  trim.released(t);
  EXPECT_TRUE(trim.tick(t + 400ms));
  trim.released(t + 900ms);
  EXPECT_FALSE(trim.tick(t + 1400ms)) << "the next burst's count started at the old one's";
  EXPECT_EQ(trims, 1);
}

TEST(HeapTrim, TrimNowTrimsAndEndsTheBurst) {
  int trims = 0;
  HeapTrim trim([&] { ++trims; });
  trim.trim_now();  // nothing pending: a closed runtime trims anyway
  trim.released(t0);
  trim.trim_now();
  EXPECT_FALSE(trim.tick(t0 + 5s)) << "the burst trimmed at once was trimmed again";
  EXPECT_EQ(trims, 2);
  EXPECT_EQ(trim.trims(), 2u);
}

using ferry::test::rss_kib;

// What the trim is for: a large block freed raises glibc's mmap threshold,
// so the next burst of temporaries comes from the heap, and freeing them
// leaves their pages resident until the heap is trimmed.
TEST(HeapTrim, TheProcessTrimGivesBackWhatABurstOfTemporariesFreed) {
  // Called through volatile pointers: the compiler may not pair and drop them.
  void* (*volatile allocate)(std::size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  release(allocate(std::size_t{8} << 20));  // mmapped, freed: the threshold rises to 8 MiB
  std::vector<void*> burst;
  for (int i = 0; i < 32; ++i) {
    burst.push_back(allocate(std::size_t{2} << 20));
    std::memset(burst.back(), 1, std::size_t{2} << 20);
  }
  void* above = allocate(4096);  // keeps the heap's top from shrinking on its own
  for (void* p : burst) release(p);
  const long kept = rss_kib();
  HeapTrim::global().released(Clock::now() - 2 * HeapTrim::quiet);
  EXPECT_TRUE(HeapTrim::global().tick());
  const long after = rss_kib();
  release(above);
  EXPECT_GT(kept - after, 32 * 1024) << "RSS " << kept << " KiB before the trim, " << after << " after";
}

}  // namespace
}  // namespace ferry
