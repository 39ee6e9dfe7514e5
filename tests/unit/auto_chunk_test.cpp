// Automatic chunking's policy with synthetic links and compute rates.
#include "ferry/runtime/auto_chunk.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// 1 GB/s, 50 µs per message: latency x bandwidth is 50 KB, under the floor.
Link lan() { return Link{50e-6, 1e9}; }

// An elementwise task over `bytes` each way whose compute takes as long as
// shipping it, on an offload device with 10 µs of launch cost.
ChunkInput balanced(std::size_t bytes, std::size_t extent = 1 << 20) {
  ChunkInput in;
  in.extent = extent;
  in.bytes_in = bytes;
  in.bytes_out = bytes;
  in.to_device = lan();
  in.from_device = lan();
  in.compute_seconds = static_cast<double>(bytes) / 1e9;
  in.launch_seconds = 10e-6;
  return in;
}

TEST(AutoChunk, MinChunkIsTheFloorOnAShortLink) {
  EXPECT_EQ(min_chunk_bytes(lan()), ChunkPolicy{}.floor_bytes);
  EXPECT_EQ(min_chunk_bytes(Link{}), ChunkPolicy{}.floor_bytes);
}

TEST(AutoChunk, MinChunkKeepsALongFatLinkBusy) {
  // 10 GB/s with 1 ms latency: 10 MB in flight per latency, 40 MB at 4 latencies.
  const Link wan{1e-3, 10e9};
  EXPECT_EQ(min_chunk_bytes(wan), std::size_t{40'000'000});
  ChunkPolicy policy;
  policy.latency_multiple = 1;
  EXPECT_EQ(min_chunk_bytes(wan, policy), std::size_t{10'000'000});
}

TEST(AutoChunk, PipelineModelMatchesTheStageArithmetic) {
  ChunkInput in = balanced(64 * MiB);
  const double ship = 50e-6 + 64.0 * MiB / 1e9;
  EXPECT_NEAR(pipeline_seconds(in, 1), ship + (10e-6 + 64.0 * MiB / 1e9) + ship, 1e-12);
  // Four pieces: first piece through all three stages, three more at the slowest stage's rate.
  const double s4 = 50e-6 + 16.0 * MiB / 1e9;
  const double c4 = 10e-6 + 16.0 * MiB / 1e9;
  EXPECT_NEAR(pipeline_seconds(in, 4), s4 + c4 + s4 + 3 * std::max(s4, c4), 1e-12);
  EXPECT_THROW(pipeline_seconds(in, 0), UsageError);
}

TEST(AutoChunk, LargeBalancedTaskIsPipelinedNearTheBound) {
  const ChunkInput in = balanced(256 * MiB);
  const ChunkPlan plan = plan_chunks(in);
  ASSERT_GE(plan.chunks, ChunkPolicy{}.min_chunks) << plan.reason;
  EXPECT_LE(plan.chunks, ChunkPolicy{}.max_chunks);
  // Never below the smallest piece that keeps the link busy.
  EXPECT_GE(256 * MiB / plan.chunks, min_chunk_bytes(lan()));
  // Three equal stages: whole it costs 3x one stage; pipelined close to 1x.
  const double bound = 256.0 * MiB / 1e9;
  EXPECT_LT(plan.pipelined_seconds, 0.5 * plan.unsplit_seconds);
  EXPECT_LT(plan.pipelined_seconds, bound / 0.9) << plan.reason;
}

TEST(AutoChunk, SmallTaskIsNotSplit) {
  // 2 MiB cannot make four pieces of the 1 MiB floor.
  const ChunkPlan plan = plan_chunks(balanced(2 * MiB));
  EXPECT_EQ(plan.chunks, 1u);
  EXPECT_NE(plan.reason.find("too small"), std::string::npos) << plan.reason;
}

TEST(AutoChunk, MaySplitIsNeverFalseWhereAPlanWouldSplit) {
  // may_split settles a task before the perf model is asked: it may say yes
  // where the plan then says no, never the other way round.
  EXPECT_FALSE(may_split(2 * MiB, 1 << 20));
  EXPECT_FALSE(may_split(256 * MiB, 3));  // three rows cannot make four pieces
  EXPECT_TRUE(may_split(256 * MiB, 1 << 20));
  for (std::size_t mib : {1, 2, 3, 4, 5, 8, 64, 256})
    for (std::size_t extent : {1, 2, 3, 4, 5, 1000, 1 << 20})
      for (const Link link : {lan(), Link{2e-3, 10e9}, Link{1e-6, 1e8}}) {
        ChunkInput in = balanced(mib * MiB, extent);
        in.to_device = in.from_device = link;
        if (plan_chunks(in).chunks > 1) {
          EXPECT_TRUE(may_split(mib * MiB, extent)) << mib << " MiB, extent " << extent;
        }
      }
  ChunkPolicy fine;
  fine.floor_bytes = 64 << 10;
  EXPECT_FALSE(may_split(2 * MiB, 1 << 20));
  EXPECT_TRUE(may_split(2 * MiB, 1 << 20, fine));
}

TEST(AutoChunk, ThresholdFollowsTheLink) {
  // 64 MiB is plenty on a LAN but under four busy pieces on a long fat link.
  EXPECT_GT(plan_chunks(balanced(64 * MiB)).chunks, 1u);
  ChunkInput wan = balanced(64 * MiB);
  wan.to_device = wan.from_device = Link{2e-3, 10e9};  // 80 MB per piece
  EXPECT_EQ(plan_chunks(wan).chunks, 1u);
}

TEST(AutoChunk, NothingToMoveIsNotSplit) {
  ChunkInput in = balanced(256 * MiB);
  in.bytes_in = in.bytes_out = 0;
  const ChunkPlan plan = plan_chunks(in);
  EXPECT_EQ(plan.chunks, 1u);
  EXPECT_NE(plan.reason.find("nothing to move"), std::string::npos) << plan.reason;
}

TEST(AutoChunk, UnknownLinkIsNotSplit) {
  ChunkInput in = balanced(256 * MiB);
  in.to_device = Link{};
  EXPECT_EQ(plan_chunks(in).chunks, 1u);
}

TEST(AutoChunk, ComputeBoundTaskGainsTooLittle) {
  // Compute 100x the transfers: overlapping them saves under the 10 % margin.
  ChunkInput in = balanced(64 * MiB);
  in.compute_seconds *= 100;
  const ChunkPlan plan = plan_chunks(in);
  EXPECT_EQ(plan.chunks, 1u);
  EXPECT_NE(plan.reason.find("no gain"), std::string::npos) << plan.reason;
}

TEST(AutoChunk, ExpensiveLaunchCapsThePieces) {
  // With a 2 ms launch each piece costs dearly: fewer pieces than a cheap launch allows.
  ChunkInput cheap = balanced(512 * MiB);
  ChunkInput dear = cheap;
  dear.launch_seconds = 2e-3;
  const ChunkPlan a = plan_chunks(cheap);
  const ChunkPlan b = plan_chunks(dear);
  ASSERT_GT(b.chunks, 1u) << b.reason;
  EXPECT_LT(b.chunks, a.chunks);
}

TEST(AutoChunk, ExtentCapsThePieces) {
  // One row per piece at most: 5 rows of 64 MiB each give 5 pieces.
  const ChunkPlan plan = plan_chunks(balanced(320 * MiB, 5));
  EXPECT_EQ(plan.chunks, 5u) << plan.reason;
  EXPECT_EQ(plan_chunks(balanced(320 * MiB, 3)).chunks, 1u);  // under min_chunks
}

TEST(AutoChunk, RangesCoverUnevenExtentsLikeSplit) {
  const auto r = chunk_ranges(10, 4);
  ASSERT_EQ(r.size(), 4u);
  const std::vector<std::pair<std::size_t, std::size_t>> want{{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  EXPECT_EQ(r, want);
  for (std::size_t extent : {1u, 7u, 1000u, 1001u}) {
    for (std::size_t n = 1; n <= std::min<std::size_t>(extent, 9); ++n) {
      const auto ranges = chunk_ranges(extent, n);
      std::size_t at = 0;
      for (const auto& [b, e] : ranges) {
        EXPECT_EQ(b, at);
        EXPECT_GT(e, b);
        at = e;
      }
      EXPECT_EQ(at, extent);
    }
  }
  EXPECT_THROW(chunk_ranges(3, 4), UsageError);
  EXPECT_THROW(chunk_ranges(3, 0), UsageError);
}

// Pieces of a chunkable task are independent tasks on disjoint ranges: true of
// elementwise kernels only, never of a reduction, whose result would be one piece's.
TEST(AutoChunk, ChunkableBuiltinsAreElementwise) {
  auto& registry = KernelRegistry::global();
  const std::set<std::string> elementwise{"fill", "copy", "map", "axpy", "scal"};
  for (const char* name : {"axpy", "scal", "dot", "nrm2", "gemm", "potrf", "trsm", "syrk", "fill", "copy", "map", "sum"}) {
    const KernelDef* k = registry.find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->chunkable, elementwise.contains(name)) << name;
  }
  for (const std::string& name : registry.names())
    EXPECT_FALSE(registry.find(name)->chunkable && registry.find(name)->returns_scalar)
        << name << " returns a scalar and is marked chunkable";
}

}  // namespace
}  // namespace ferry
