// HeapTrim: after a recovery, once it has been quiet for HeapTrim::quiet,
// the heap's free pages go back, once per burst; and glibc's heap really
// keeps what large temporaries freed until then.
#include "base/heap_trim.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "../support/proc_status.hpp"

namespace ferry::detail {
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
  trim.recovered(t0);
  trim.recovered(t0 + 800ms);  // still recovering: the quiet starts again
  EXPECT_FALSE(trim.tick(t0 + 1200ms));
  EXPECT_EQ(trims, 0);
  EXPECT_TRUE(trim.tick(t0 + 1800ms));
  EXPECT_FALSE(trim.tick(t0 + 5s)) << "trimmed twice for one burst";
  EXPECT_EQ(trims, 1);
  trim.recovered(t0 + 6s);  // the next fault
  EXPECT_TRUE(trim.tick(t0 + 7s));
  EXPECT_EQ(trims, 2);
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
  HeapTrim::global().recovered(Clock::now() - 2 * HeapTrim::quiet);
  EXPECT_TRUE(HeapTrim::global().tick());
  const long after = rss_kib();
  release(above);
  EXPECT_GT(kept - after, 32 * 1024) << "RSS " << kept << " KiB before the trim, " << after << " after";
}

}  // namespace
}  // namespace ferry::detail
