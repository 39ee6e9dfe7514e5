// Automatic chunking's policy: into how many pieces a chunkable task on an
// offload device (a remote, a local GPU) should be cut so that shipping piece
// i+1, computing piece i and fetching piece i-1 overlap. A pure function of
// the measured link and compute rates, so it is tested with synthetic ones.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ferry/runtime/link_model.hpp"

namespace ferry {

struct ChunkPolicy {
  // No piece smaller than this, whatever the link: below it per-message and
  // per-task overheads dominate on every transport we measured.
  std::size_t floor_bytes = std::size_t{1} << 20;
  // A piece spends at least this many link latencies on the wire, so the
  // link stays busy (latency x bandwidth is what one message leaves idle).
  double latency_multiple = 4;
  // Fewer pieces leave the pipeline little to overlap; more only add overhead.
  std::size_t min_chunks = 4;
  std::size_t max_chunks = 64;
  // Split only when the modelled pipeline beats the unsplit task by this fraction.
  double min_gain = 0.10;
};

struct ChunkInput {
  std::size_t extent = 0;     // rows, or elements of a single row: what split() divides
  std::size_t bytes_in = 0;   // shipped to the device (inputs not valid there)
  std::size_t bytes_out = 0;  // fetched back (outputs)
  Link to_device;             // host -> device
  Link from_device;           // device -> host
  double compute_seconds = 0;  // the whole task on the device
  double launch_seconds = 0;   // fixed cost of one task on the device
};

struct ChunkPlan {
  std::size_t chunks = 1;  // 1: run it whole
  double unsplit_seconds = 0;
  double pipelined_seconds = 0;  // with `chunks` pieces (unsplit_seconds when 1)
  std::string reason;            // why, for Options::explain and the trace
};

// Smallest piece worth sending over `link`: max(floor, latency_multiple x
// latency x bandwidth).
std::size_t min_chunk_bytes(const Link& link, const ChunkPolicy& policy = {});

// Modelled time of the task cut into `chunks` equal pieces, each going
// ship -> compute -> fetch, with stages of different pieces overlapping.
double pipeline_seconds(const ChunkInput& in, std::size_t chunks);

ChunkPlan plan_chunks(const ChunkInput& in, const ChunkPolicy& policy = {});

// Whether a task moving `moved` bytes (the larger direction) over `extent`
// rows or elements could be split by plan_chunks on any link: enough for
// min_chunks pieces of floor_bytes. Asked first, since nearly every task is
// far below it and the perf model's estimate plan_chunks needs is not free.
bool may_split(std::size_t moved, std::size_t extent, const ChunkPolicy& policy = {});

// [begin, end) of each piece along the extent; sizes differ by at most one,
// the larger first (the same cut as Buffer::split).
std::vector<std::pair<std::size_t, std::size_t>> chunk_ranges(std::size_t extent, std::size_t chunks);

}  // namespace ferry
