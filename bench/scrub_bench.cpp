// What keeping another client's bytes from a ferryd client costs, per
// 256 MiB replica shipped in 16 MiB puts: zeroing the replica when it is
// made (eager) against tracking the ranges puts wrote and zeroing only the
// gaps before the first read (lazy, what ferryd does), each next to the
// peer that sets the scale: one pass writing the payload into the replica,
// the least a ship costs on the server. The target: scrubbing < 5 % of a
// ship. Writes JSON (bench-scrub.json unless --benchmark_out says
// otherwise), then the ratios.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "machine.hpp"
#include "written_ranges.hpp"

namespace {

constexpr std::size_t replica_bytes = 256u << 20, put_bytes = 16u << 20;

struct Memory {
  std::byte* replica = static_cast<std::byte*>(
      ::mmap(nullptr, replica_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  std::vector<std::byte> payload = std::vector<std::byte>(replica_bytes, std::byte{3});
};
Memory& memory() {
  static Memory m;
  return m;
}

void eager_zero(benchmark::State& state) {
  for (auto _ : state) {
    std::memset(memory().replica, 0, replica_bytes);
    benchmark::DoNotOptimize(memory().replica);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * replica_bytes));
}

void lazy_ranges(benchmark::State& state) {
  for (auto _ : state) {
    ferry::ferryd::WrittenRanges written(replica_bytes);
    for (std::size_t offset = 0; offset < replica_bytes; offset += put_bytes) written.add(offset, put_bytes);
    benchmark::DoNotOptimize(written.zero_unwritten(memory().replica));  // the first get: nothing left to zero
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * replica_bytes));
}

void ship_copy(benchmark::State& state) {
  for (auto _ : state) {
    for (std::size_t offset = 0; offset < replica_bytes; offset += put_bytes)
      std::memcpy(memory().replica + offset, memory().payload.data() + offset, put_bytes);
    benchmark::DoNotOptimize(memory().replica);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * replica_bytes));
}

BENCHMARK(eager_zero)->Unit(benchmark::kMillisecond);
BENCHMARK(lazy_ranges)->Unit(benchmark::kMillisecond);
BENCHMARK(ship_copy)->Unit(benchmark::kMillisecond);

// Remembers each benchmark's time per iteration for the summary.
class Summary : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) seconds[run.benchmark_name()] = run.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("machine", ferry::bench::machine());
  benchmark::AddCustomContext("revision", FERRY_GIT_REVISION);
  std::vector<char*> args(argv, argv + argc);
  std::string out = "--benchmark_out=bench-scrub.json";
  bool has_out = false;
  for (char* a : args) has_out = has_out || std::string(a).starts_with("--benchmark_out=");
  if (!has_out) args.push_back(out.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  Summary summary;
  benchmark::RunSpecifiedBenchmarks(&summary);
  const double ship = summary.seconds["ship_copy"];
  if (ship <= 0) return 0;  // filtered out
  const double eager = summary.seconds["eager_zero"], lazy = summary.seconds["lazy_ranges"];
  fmt::print("\n256 MiB replica in 16 MiB puts, against one pass writing the payload (a ship's least cost):\n");
  fmt::print("  eager zero-fill at creation: {:6.1f} % of a ship\n", 100 * eager / ship);
  fmt::print("  lazy ranges, zero the gaps:  {:6.3f} % of a ship (target < 5 %: {})\n", 100 * lazy / ship,
             lazy / ship < 0.05 ? "met" : "NOT met");
  return 0;
}
