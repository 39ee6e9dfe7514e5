// One alloc+free pair per iteration: Ferry's pooled pinned memory against the
// peers it replaces (malloc, mmap, and cudaHostAlloc where a GPU exists).
// Nothing touches the memory: the point is the allocator's own cost.
// Writes JSON (bench-allocator.json unless --benchmark_out says otherwise),
// then a summary with ratios and the verdict against its target.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/units.hpp"
#include "machine.hpp"

#if FERRY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

constexpr std::int64_t min_bytes = 64;
constexpr std::int64_t max_bytes = std::int64_t{64} << 20;
constexpr std::size_t target_max_bytes = std::size_t{64} << 10;  // ≤ 64 KiB
constexpr double target_ns = 50.0;

// Shared by all threads of a run, as the runtime's one pinned pool would be.
ferry::PinnedPool* pool = nullptr;

// Runs one pair per iteration; a failure ends the run with the reason
// instead of aborting the whole program.
template <typename Pair>
void run_pairs(benchmark::State& state, Pair pair) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    try {
      pair(bytes);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
}

void pinned_pool(benchmark::State& state) {
  run_pairs(state, [](std::size_t bytes) {
    void* p = pool->allocate(bytes);
    benchmark::DoNotOptimize(p);
    pool->deallocate(p, bytes);
  });
}

void malloc_free(benchmark::State& state) {
  run_pairs(state, [](std::size_t bytes) {
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    benchmark::DoNotOptimize(p);
    std::free(p);
  });
}

void mmap_munmap(benchmark::State& state) {
  run_pairs(state, [](std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    benchmark::DoNotOptimize(p);
    ::munmap(p, bytes);
  });
}

#if FERRY_WITH_CUDA
void cuda_host_alloc(benchmark::State& state) {
  run_pairs(state, [](std::size_t bytes) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) throw std::bad_alloc();
    benchmark::DoNotOptimize(p);
    cudaFreeHost(p);
  });
}
#endif

void add(const char* name, void (*fn)(benchmark::State&)) {
  benchmark::RegisterBenchmark(name, fn)
      ->RangeMultiplier(4)
      ->Range(min_bytes, max_bytes)
      ->Threads(1)
      ->Threads(2)
      ->Unit(benchmark::kNanosecond);
}

// Key: allocator, bytes, threads. Value: ns per pair of each iteration run
// (several with --benchmark_repetitions).
using Results = std::map<std::tuple<std::string, std::size_t, int>, std::vector<double>>;

// The console report as usual, keeping each run's time for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      const std::size_t bytes = std::stoull(run.run_name.args);
      results[{run.run_name.function_name, bytes, static_cast<int>(run.threads)}].push_back(run.GetAdjustedRealTime());
    }
  }
  Results results;
};

double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

void print_summary(const Results& results, const std::vector<std::string>& names) {
  const auto lookup = [&](const std::string& name, std::size_t bytes, int threads) -> const std::vector<double>* {
    auto it = results.find({name, bytes, threads});
    return it == results.end() || it->second.empty() ? nullptr : &it->second;
  };
  const auto ratio = [&](const std::string& name, std::size_t bytes, int threads) -> std::string {
    const auto* peer = lookup(name, bytes, threads);
    const auto* pooled = lookup("pinned_pool", bytes, threads);
    if (peer == nullptr || pooled == nullptr || median(*pooled) <= 0) return "-";
    return fmt::format("{:.1f}x", median(*peer) / median(*pooled));
  };

  fmt::print(
      "\nSummary: ns per alloc+free pair, and how many times slower each peer is than the pool\n"
      "(with 2 threads: wall time divided by the pairs both threads completed)\n\n");
  std::string header = fmt::format("{:>9} {:>7} {:>11}", "size", "threads", "pool ns");
  for (std::size_t i = 1; i < names.size(); ++i) header += fmt::format(" {:>18}", names[i] + "/pool");
  fmt::print("{}\n", header);
  for (std::size_t bytes = min_bytes; bytes <= static_cast<std::size_t>(max_bytes); bytes *= 4) {
    for (int threads : {1, 2}) {
      const auto* pooled = lookup("pinned_pool", bytes, threads);
      if (pooled == nullptr &&
          std::none_of(names.begin(), names.end(), [&](const auto& n) { return lookup(n, bytes, threads) != nullptr; }))
        continue;
      std::string line = fmt::format("{:>9} {:>7} {:>11}", ferry::format_bytes(bytes), threads,
                                     pooled ? fmt::format("{:.1f}", median(*pooled)) : std::string("-"));
      for (std::size_t i = 1; i < names.size(); ++i) line += fmt::format(" {:>18}", ratio(names[i], bytes, threads));
      fmt::print("{}\n", line);
    }
  }

  // The target is a latency, so it is judged on the single-thread runs.
  std::vector<double> small;
  for (std::size_t bytes = min_bytes; bytes <= target_max_bytes; bytes *= 4)
    if (const auto* pooled = lookup("pinned_pool", bytes, 1)) small.insert(small.end(), pooled->begin(), pooled->end());
  if (small.empty()) {
    fmt::print("\npooled pinned alloc+free ≤ 64 KiB: no single-thread pool results (filtered out or failed)\n");
    return;
  }
  const double ns = median(small);
  fmt::print("\npooled pinned alloc+free ≤ 64 KiB: median {:.1f} ns (target ≤ {:.0f} ns): {}\n", ns, target_ns,
             ns <= target_ns ? "PASS" : "MISS");
}

}  // namespace

int main(int argc, char** argv) {
  // Default the JSON file, so that every run leaves a record behind.
  std::vector<char*> args(argv, argv + argc);
  std::string default_out = "--benchmark_out=bench-allocator.json";
  if (std::none_of(args.begin(), args.end(),
                   [](const char* a) { return std::string_view(a).starts_with("--benchmark_out="); }))
    args.push_back(default_out.data());
  args.push_back(nullptr);
  int count = static_cast<int>(args.size()) - 1;
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return EXIT_FAILURE;

  ferry::PinnedPool shared_pool;
  pool = &shared_pool;
  // A new slab costs milliseconds (mmap, mlock); a run whose first iteration
  // already exceeds --benchmark_min_time would report only that. Two blocks
  // of each size at once is the most the two-thread runs hold.
  for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const auto n = static_cast<std::size_t>(bytes);
    void* first = shared_pool.allocate(n);
    void* second = shared_pool.allocate(n);
    shared_pool.deallocate(second, n);
    shared_pool.deallocate(first, n);
  }

  benchmark::AddCustomContext("git_revision", FERRY_GIT_REVISION);
  benchmark::AddCustomContext("machine", ferry::bench::machine());
  benchmark::AddCustomContext("ferry_version", ferry::config::version);
  benchmark::AddCustomContext("pinned_source", shared_pool.source().name());

  std::vector<std::string> names = {"pinned_pool", "malloc", "mmap"};
  add("pinned_pool", pinned_pool);
  add("malloc", malloc_free);
  add("mmap", mmap_munmap);
#if FERRY_WITH_CUDA
  if (ferry::cuda::device_count() > 0) {
    add("cudaHostAlloc", cuda_host_alloc);
    names.emplace_back("cudaHostAlloc");
  }
#endif
  if (ferry::cuda::device_count() == 0)
    fmt::print("cudaHostAlloc/cudaFreeHost skipped: {}\n", ferry::cuda::unavailable_reason());

  SummaryReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                 : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  if (!reporter.results.empty()) {
    print_summary(reporter.results, names);
    fmt::print("pool: {}\n", shared_pool.describe());
  }
  return EXIT_SUCCESS;
}
