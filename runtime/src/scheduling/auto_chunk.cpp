// Automatic chunking's policy: a three-stage pipeline model over the measured
// link and the perf model's compute estimate.
#include "ferry/runtime/auto_chunk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ferry/error.hpp"

namespace ferry {

namespace {

// One piece's time on one link; a direction with nothing to move costs nothing.
double stage(const Link& link, double bytes) {
  if (bytes <= 0) return 0;
  return link.latency_seconds + bytes / link.bytes_per_second;
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / double(1 << 20)); }

// The fewest pieces plan_chunks will cut a task into.
std::size_t fewest_pieces(const ChunkPolicy& policy) { return std::max<std::size_t>(2, policy.min_chunks); }

}  // namespace

std::size_t min_chunk_bytes(const Link& link, const ChunkPolicy& policy) {
  const double busy = policy.latency_multiple * link.latency_seconds * link.bytes_per_second;
  if (!std::isfinite(busy) || busy <= static_cast<double>(policy.floor_bytes)) return policy.floor_bytes;
  return static_cast<std::size_t>(std::ceil(busy));
}

bool may_split(std::size_t moved, std::size_t extent, const ChunkPolicy& policy) {
  const std::size_t most = std::min({policy.max_chunks, extent, moved / std::max<std::size_t>(policy.floor_bytes, 1)});
  return most >= fewest_pieces(policy);
}

double pipeline_seconds(const ChunkInput& in, std::size_t chunks) {
  if (chunks == 0) throw UsageError("pipeline_seconds: chunks must be at least 1");
  const double n = static_cast<double>(chunks);
  const double ship = stage(in.to_device, static_cast<double>(in.bytes_in) / n);
  const double compute = in.launch_seconds + in.compute_seconds / n;
  const double fetch = stage(in.from_device, static_cast<double>(in.bytes_out) / n);
  // The first piece goes through every stage; each further one adds the
  // slowest stage (the pipeline's rate).
  return ship + compute + fetch + (n - 1) * std::max({ship, compute, fetch});
}

ChunkPlan plan_chunks(const ChunkInput& in, const ChunkPolicy& policy) {
  ChunkPlan plan;
  const bool links_known = (in.bytes_in == 0 || in.to_device.bytes_per_second > 0) &&
                           (in.bytes_out == 0 || in.from_device.bytes_per_second > 0);
  if (!links_known) {
    plan.unsplit_seconds = plan.pipelined_seconds = std::numeric_limits<double>::infinity();
    plan.reason = "no measured link to the device yet";
    return plan;
  }
  plan.unsplit_seconds = plan.pipelined_seconds = pipeline_seconds(in, 1);
  if (in.bytes_in == 0 && in.bytes_out == 0) {
    plan.reason = "nothing to move: no transfer to overlap";
    return plan;
  }
  // The direction moving more bytes sets how small a piece may be.
  const bool inbound = in.bytes_in >= in.bytes_out;
  const std::size_t moved = inbound ? in.bytes_in : in.bytes_out;
  const std::size_t smallest = min_chunk_bytes(inbound ? in.to_device : in.from_device, policy);
  const std::size_t most = std::min({policy.max_chunks, in.extent, std::max<std::size_t>(1, moved / smallest)});
  if (most < fewest_pieces(policy)) {
    plan.reason = fmt::format("too small: {} moved, pieces of at least {} give {} (fewer than {})", mib(moved),
                              mib(smallest), most, policy.min_chunks);
    return plan;
  }
  std::size_t best = 1;
  double best_seconds = plan.unsplit_seconds;
  for (std::size_t n = fewest_pieces(policy); n <= most; ++n) {
    const double t = pipeline_seconds(in, n);
    if (t < best_seconds) {
      best = n;
      best_seconds = t;
    }
  }
  if (best == 1 || best_seconds > (1 - policy.min_gain) * plan.unsplit_seconds) {
    plan.reason = fmt::format("no gain: {:.3g} s whole, {:.3g} s at best in pieces", plan.unsplit_seconds, best_seconds);
    return plan;
  }
  plan.chunks = best;
  plan.pipelined_seconds = best_seconds;
  plan.reason = fmt::format("{} pieces of about {}: {:.3g} s pipelined against {:.3g} s whole", best,
                            mib(static_cast<double>(moved) / static_cast<double>(best)), best_seconds,
                            plan.unsplit_seconds);
  return plan;
}

std::vector<std::pair<std::size_t, std::size_t>> chunk_ranges(std::size_t extent, std::size_t chunks) {
  if (chunks == 0 || chunks > extent)
    throw UsageError(fmt::format("chunk_ranges: {} pieces of an extent of {}; ask for 1 to {}", chunks, extent, extent));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  out.reserve(chunks);
  std::size_t begin = 0;
  for (std::size_t i = 0; i < chunks; ++i) {
    const std::size_t len = extent / chunks + (i < extent % chunks ? 1 : 0);
    out.emplace_back(begin, begin + len);
    begin += len;
  }
  return out;
}

}  // namespace ferry
