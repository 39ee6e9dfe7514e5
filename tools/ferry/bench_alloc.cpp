// `ferry bench-alloc`: the allocator's own cost, for the README demo. Nothing
// touches the memory: page faults would swamp what the pool itself costs.
// The full benchmark with threads and JSON output is bench/allocator_bench.
#include "bench_alloc.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/units.hpp"

namespace ferry::tools {

namespace {

using clock_type = std::chrono::steady_clock;

constexpr int pairs_per_batch = 1000;
constexpr std::array<std::size_t, 5> sizes = {64, 4 << 10, 64 << 10, 1 << 20, 16 << 20};

// A volatile store keeps the compiler from pairing malloc with free and
// deleting both; it costs the same for every allocator measured.
void* volatile sink;

struct Cell {
  std::optional<double> ns;
  std::string error;
};

// Median over batches of the mean ns per pair within a batch; one untimed
// batch first so that the pool's first slab is not part of the measurement.
template <typename Pair>
Cell measure(Pair pair, std::size_t bytes, clock_type::duration budget) {
  try {
    for (int i = 0; i < pairs_per_batch; ++i) pair(bytes);
    std::vector<double> samples;
    const auto deadline = clock_type::now() + budget;
    do {
      const auto start = clock_type::now();
      for (int i = 0; i < pairs_per_batch; ++i) pair(bytes);
      const std::chrono::duration<double, std::nano> elapsed = clock_type::now() - start;
      samples.push_back(elapsed.count() / pairs_per_batch);
    } while (samples.size() < 3 || clock_type::now() < deadline);
    const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
    std::nth_element(samples.begin(), middle, samples.end());
    return {*middle, {}};
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

std::string format_ns(const Cell& cell) { return cell.ns ? fmt::format("{:.1f}", *cell.ns) : "failed"; }

std::string format_ratio(const Cell& other, const Cell& pool) {
  if (!other.ns || !pool.ns || *pool.ns <= 0) return "-";
  return fmt::format("{:.1f}x", *other.ns / *pool.ns);
}

}  // namespace

int run_bench_alloc(double seconds) {
  PinnedPool pool;
  const auto budget = std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(seconds / (3.0 * static_cast<double>(sizes.size()))));

  auto pool_pair = [&pool](std::size_t bytes) {
    void* p = pool.allocate(bytes);
    sink = p;
    pool.deallocate(p, bytes);
  };
  auto malloc_pair = [](std::size_t bytes) {
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    sink = p;
    std::free(p);
  };
  auto mmap_pair = [](std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    sink = p;
    ::munmap(p, bytes);
  };

  fmt::print("median ns per alloc+free pair (batches of {} pairs, {:.1f} s in all; memory untouched)\n\n",
             pairs_per_batch, seconds);
  fmt::print("{:>9}  {:>9}  {:>9}  {:>9}  {:>11}  {:>9}\n", "size", "pool", "malloc", "mmap", "malloc/pool",
             "mmap/pool");
  std::vector<std::string> errors;
  for (std::size_t bytes : sizes) {
    const Cell pooled = measure(pool_pair, bytes, budget);
    const Cell malloced = measure(malloc_pair, bytes, budget);
    const Cell mapped = measure(mmap_pair, bytes, budget);
    fmt::print("{:>9}  {:>9}  {:>9}  {:>9}  {:>11}  {:>9}\n", format_bytes(bytes), format_ns(pooled),
               format_ns(malloced), format_ns(mapped), format_ratio(malloced, pooled), format_ratio(mapped, pooled));
    for (const auto* cell : {&pooled, &malloced, &mapped})
      if (!cell->error.empty()) errors.push_back(fmt::format("{}: {}", format_bytes(bytes), cell->error));
  }
  fmt::print("\npool: {}\n", pool.describe());
  for (const auto& e : errors) fmt::print("failed at {}\n", e);
  return errors.empty() ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace ferry::tools
