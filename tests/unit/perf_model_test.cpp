// Performance models: robust medians, calibration, regression over sizes,
// hints before any run, persistence.
#include "ferry/runtime/perf_model.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

const Cost no_hint{};
const DevicePeak peak{};

// A fresh directory per test, so tests can run in parallel (ctest -j).
fs::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 (std::string("ferry_perf_") + info->name() + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

using testing::ScopedEnv;

TEST(SizeBucket, IsFloorLog2) {
  EXPECT_EQ(size_bucket(0), 0u);
  EXPECT_EQ(size_bucket(1), 0u);
  EXPECT_EQ(size_bucket(2), 1u);
  EXPECT_EQ(size_bucket(3), 1u);
  EXPECT_EQ(size_bucket(1024), 10u);
  EXPECT_EQ(size_bucket(2047), 10u);
  EXPECT_EQ(size_bucket(std::size_t{1} << 40), 40u);
}

TEST(PerfModels, MedianIgnoresOneHiccup) {
  PerfModels models;
  const std::size_t bytes = 3 * 1024 * 1024;
  for (int i = 0; i < 19; ++i) models.record("gemm", "cuda-h100", bytes, 190e-6 + (i % 3 - 1) * 2e-6);
  models.record("gemm", "cuda-h100", bytes, 0.100);  // one 100 ms hiccup
  const Estimate e = models.estimate("gemm", "cuda-h100", bytes, no_hint, peak);
  EXPECT_EQ(e.source, Estimate::Source::history);
  EXPECT_EQ(e.samples, 20u);
  EXPECT_NEAR(e.seconds, 190e-6, 3e-6);
  EXPECT_TRUE(e.calibrated);
  EXPECT_GT(e.confidence, 0.9);
}

TEST(PerfModels, ConfidenceFallsWithSpread) {
  PerfModels models;
  for (int i = 0; i < 10; ++i) {
    models.record("k", "steady", 4096, 1e-3);
    models.record("k", "noisy", 4096, i % 2 == 0 ? 0.5e-3 : 2e-3);
  }
  const Estimate steady = models.estimate("k", "steady", 4096, no_hint, peak);
  const Estimate noisy = models.estimate("k", "noisy", 4096, no_hint, peak);
  EXPECT_GT(steady.confidence, noisy.confidence);
  EXPECT_GT(noisy.confidence, 0.0);
}

TEST(PerfModels, CalibratedAfterNRuns) {
  PerfModels models(PerfModels::Options{.history = 32, .calibrated_after = 3});
  double previous_confidence = 0;
  for (std::size_t n = 1; n <= 4; ++n) {
    models.record("axpy", "cpu-2t", 1 << 20, 1e-3);
    const Estimate e = models.estimate("axpy", "cpu-2t", 1 << 20, no_hint, peak);
    EXPECT_EQ(e.source, Estimate::Source::history);
    EXPECT_EQ(e.samples, n);
    EXPECT_EQ(e.calibrated, n >= 3) << n << " runs";
    EXPECT_GT(e.confidence, previous_confidence);
    previous_confidence = e.confidence;
  }
}

TEST(PerfModels, HistoryIsBoundedToRecentRuns) {
  PerfModels models(PerfModels::Options{.history = 4, .calibrated_after = 3});
  for (int i = 1; i <= 10; ++i) models.record("k", "d", 100, i * 1e-3);
  const Estimate e = models.estimate("k", "d", 100, no_hint, peak);
  EXPECT_EQ(e.samples, 4u);
  EXPECT_DOUBLE_EQ(e.seconds, 8.5e-3);  // median of 7, 8, 9, 10 ms
}

TEST(PerfModels, EstimatesFollowNewRunsWithinAnEighthOfTheWindow) {
  // The median is recomputed once an eighth of the window is new, not per
  // run: estimates and records both run for every task.
  PerfModels models(PerfModels::Options{.history = 32, .calibrated_after = 3});
  for (int i = 0; i < 32; ++i) models.record("k", "d", 100, 1e-3);
  EXPECT_DOUBLE_EQ(models.estimate("k", "d", 100, no_hint, peak).seconds, 1e-3);
  for (int i = 0; i < 20; ++i) models.record("k", "d", 100, 3e-3);  // most of the window is 3 ms now
  EXPECT_DOUBLE_EQ(models.estimate("k", "d", 100, no_hint, peak).seconds, 3e-3);
  // Under eight runs, each one counts at once.
  models.record("k", "e", 100, 1e-3);
  EXPECT_DOUBLE_EQ(models.estimate("k", "e", 100, no_hint, peak).seconds, 1e-3);
  models.record("k", "e", 100, 3e-3);
  EXPECT_DOUBLE_EQ(models.estimate("k", "e", 100, no_hint, peak).seconds, 2e-3);
}

TEST(PerfModels, IgnoresInvalidTimes) {
  PerfModels models;
  models.record("k", "d", 100, -1);
  models.record("k", "d", 100, std::nan(""));
  EXPECT_EQ(models.estimate("k", "d", 100, no_hint, peak).source, Estimate::Source::hint);
  EXPECT_TRUE(models.summary().empty());
}

TEST(PerfModels, RegressionFollowsAPowerLaw) {
  PerfModels models;
  const double per_byte = 1e-9;  // time = c * bytes
  for (std::size_t bytes : {std::size_t{1} << 12, std::size_t{1} << 16, std::size_t{1} << 20})
    for (int i = 0; i < 3; ++i) models.record("copy", "cpu", bytes, per_byte * static_cast<double>(bytes));
  for (std::size_t bytes : {std::size_t{1} << 14, std::size_t{3} << 24, std::size_t{1} << 30}) {
    const Estimate e = models.estimate("copy", "cpu", bytes, no_hint, peak);
    EXPECT_EQ(e.source, Estimate::Source::regression);
    EXPECT_FALSE(e.calibrated);
    EXPECT_EQ(e.samples, 9u);
    EXPECT_GT(e.confidence, 0.0);
    EXPECT_LT(e.confidence, 0.5);
    const double truth = per_byte * static_cast<double>(bytes);
    EXPECT_GT(e.seconds, truth / 2) << bytes;
    EXPECT_LT(e.seconds, truth * 2) << bytes;
  }
}

TEST(PerfModels, OneMeasuredSizeScalesLinearly) {
  PerfModels models;
  models.record("k", "d", 1 << 20, 1e-3);
  const Estimate e = models.estimate("k", "d", 1 << 24, no_hint, peak);
  EXPECT_EQ(e.source, Estimate::Source::regression);
  EXPECT_GT(e.seconds, 16e-3 / 2);
  EXPECT_LT(e.seconds, 16e-3 * 2);
}

TEST(PerfModels, HintBeforeAnyRun) {
  PerfModels models;
  models.record("gemm", "cpu-2t", 1 << 20, 1e-3);  // another device's history does not count
  const DevicePeak gpu{.flops_per_second = 1e12, .bytes_per_second = 1e11, .launch_seconds = 5e-6};
  const Estimate compute_bound = models.estimate("gemm", "cuda-h100", 1 << 20, Cost{2e9, 1e6}, gpu);
  EXPECT_EQ(compute_bound.source, Estimate::Source::hint);
  EXPECT_EQ(compute_bound.samples, 0u);
  EXPECT_EQ(compute_bound.confidence, 0.0);
  EXPECT_FALSE(compute_bound.calibrated);
  EXPECT_DOUBLE_EQ(compute_bound.seconds, 5e-6 + 2e-3);
  const Estimate memory_bound = models.estimate("gemm", "cuda-h100", 1 << 20, Cost{1e6, 1e9}, gpu);
  EXPECT_DOUBLE_EQ(memory_bound.seconds, 5e-6 + 1e-2);
}

TEST(PerfModels, SaveThenLoadGivesTheSameEstimates) {
  const fs::path dir = temp_dir();
  PerfModels saved(PerfModels::Options{.history = 8, .calibrated_after = 3});
  for (int i = 0; i < 12; ++i) {
    saved.record("gemm", "cpu-2t", 1 << 20, 1e-3 * (1 + i % 4) / 3.0);
    saved.record("gemm", "cpu-2t", 1 << 24, 17e-3 + i * 1e-5);
    saved.record("my kernel/v2", "remote:gpu1:7070/cuda:0", 4096, 0.1234567890123e-3);
  }
  saved.save(dir);
  EXPECT_TRUE(fs::exists(dir / "gemm@cpu-2t.json"));
  for (const auto& entry : fs::directory_iterator(dir)) EXPECT_EQ(entry.path().extension(), ".json");

  PerfModels loaded(PerfModels::Options{.history = 8, .calibrated_after = 3});
  loaded.load(dir);
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{1} << 22, std::size_t{1} << 24}) {
    const Estimate a = saved.estimate("gemm", "cpu-2t", bytes, no_hint, peak);
    const Estimate b = loaded.estimate("gemm", "cpu-2t", bytes, no_hint, peak);
    EXPECT_DOUBLE_EQ(a.seconds, b.seconds) << bytes;
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.samples, b.samples);
    EXPECT_EQ(a.calibrated, b.calibrated);
  }
  EXPECT_DOUBLE_EQ(loaded.estimate("my kernel/v2", "remote:gpu1:7070/cuda:0", 4096, no_hint, peak).seconds,
                   0.1234567890123e-3);
  EXPECT_EQ(loaded.summary().size(), saved.summary().size());
  fs::remove_all(dir);
}

TEST(PerfModels, LoadMergesIntoBoundedHistory) {
  const fs::path dir = temp_dir();
  PerfModels old_runs;
  for (int i = 0; i < 3; ++i) old_runs.record("k", "d", 100, 5e-3);
  old_runs.save(dir);
  PerfModels models(PerfModels::Options{.history = 4, .calibrated_after = 3});
  models.record("k", "d", 100, 1e-3);
  models.record("k", "d", 100, 1e-3);
  models.load(dir);
  const Estimate e = models.estimate("k", "d", 100, no_hint, peak);
  EXPECT_EQ(e.samples, 4u);  // 2 in memory + 3 loaded, bounded by history 4: the oldest went
  EXPECT_DOUBLE_EQ(e.seconds, 5e-3);
  fs::remove_all(dir);
}

TEST(PerfModels, CorruptAndForeignFilesAreSkipped) {
  const fs::path dir = temp_dir();
  PerfModels good;
  for (int i = 0; i < 3; ++i) good.record("gemm", "cpu", 100, 2e-3);
  good.save(dir);
  std::ofstream(dir / "broken@cpu.json") << "{ \"version\": 1, \"kernel\": ";
  std::ofstream(dir / "future@cpu.json")
      << R"({"version": 2, "kernel": "future", "device_key": "cpu", "buckets": {"6": [1.0]}})";
  std::ofstream(dir / "badtimes@cpu.json")
      << R"({"version": 1, "kernel": "badtimes", "device_key": "cpu", "buckets": {"6": [-1.0]}})";
  std::ofstream(dir / "notes.txt") << "not a model";

  PerfModels models;
  EXPECT_NO_THROW(models.load(dir));
  EXPECT_EQ(models.estimate("gemm", "cpu", 100, no_hint, peak).source, Estimate::Source::history);
  EXPECT_EQ(models.estimate("future", "cpu", 100, no_hint, peak).source, Estimate::Source::hint);
  EXPECT_EQ(models.estimate("badtimes", "cpu", 100, no_hint, peak).source, Estimate::Source::hint);
  EXPECT_EQ(models.summary().size(), 1u);
  fs::remove_all(dir);
}

TEST(PerfModels, LoadingAMissingDirectoryIsNotAnError) {
  PerfModels models;
  EXPECT_NO_THROW(models.load(temp_dir() / "nothing-here"));
  EXPECT_TRUE(models.summary().empty());
}

TEST(PerfModels, DefaultDirFollowsXdgThenHome) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(PerfModels::default_dir(), fs::path("/xdg/cache/ferry/perfmodels"));
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "");
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(PerfModels::default_dir(), fs::path("/home/someone/.cache/ferry/perfmodels"));
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    EXPECT_EQ(PerfModels::default_dir(), fs::path("/tmp/ferry-perfmodels"));
  }
}

TEST(PerfModels, SummaryListsEveryBucket) {
  PerfModels models;
  models.record("a", "cpu", 1 << 10, 1e-3);
  models.record("a", "cpu", 1 << 10, 3e-3);
  models.record("a", "cpu", 1 << 20, 5e-3);
  models.record("b", "gpu", 8, 7e-3);
  const auto rows = models.summary();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kernel, "a");
  EXPECT_EQ(rows[0].bucket, 10u);
  EXPECT_EQ(rows[0].samples, 2u);
  EXPECT_DOUBLE_EQ(rows[0].median_seconds, 2e-3);
  EXPECT_EQ(rows[1].bucket, 20u);
  EXPECT_EQ(rows[2].device_key, "gpu");
  EXPECT_EQ(rows[2].bucket, 3u);
}

TEST(PerfModels, RecordAndEstimateFromManyThreads) {
  PerfModels models(PerfModels::Options{.history = 16, .calibrated_after = 3});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&models, t] {
      for (int i = 0; i < 2000; ++i) {
        models.record("k", "d" + std::to_string(t % 2), static_cast<std::size_t>(1) << (i % 20), 1e-3);
        (void)models.estimate("k", "d0", 1 << 12, no_hint, peak);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(models.estimate("k", "d1", 1 << 12, no_hint, peak).samples, 16u);
}

}  // namespace
// A new CPU starts from its measured peak (a timed dgemm and daxpy at
// start), not from fixed figures: its first estimate of a gemm is the
// kernel's cost over those rates, and says so.
TEST(PerfModels, AnUncalibratedDeviceHasAProbeDerivedEstimate) {
  Runtime rt(testing::quiet_options());
  const DeviceInfo cpu = rt.devices().front();
  ASSERT_EQ(cpu.kind, DeviceKind::cpu);
  EXPECT_TRUE(cpu.peak.measured);
  EXPECT_GT(cpu.peak.flops_per_second, 1e6) << "a probe that measured nothing";
  EXPECT_GT(cpu.peak.bytes_per_second, 1e6);
  EXPECT_TRUE(std::isfinite(cpu.peak.flops_per_second) && std::isfinite(cpu.peak.bytes_per_second));
  EXPECT_NE(cpu.peak.flops_per_second, DevicePeak{}.flops_per_second) << "the fixed default, not a measurement";

  PerfModels models;  // nothing learned yet
  const double n = 512;
  const Cost gemm{2 * n * n * n, 3 * n * n * 8};
  const Estimate e = models.estimate("gemm", cpu.perf_key, 3 * 512 * 512 * 8, gemm, cpu.peak);
  EXPECT_EQ(e.source, Estimate::Source::probe);
  EXPECT_STREQ(to_string(e.source), "probe");
  EXPECT_FALSE(e.calibrated);
  EXPECT_GT(e.seconds, cpu.peak.launch_seconds);
  EXPECT_DOUBLE_EQ(e.seconds, cpu.peak.launch_seconds + std::max(gemm.flops / cpu.peak.flops_per_second,
                                                                  gemm.bytes / cpu.peak.bytes_per_second));
}

}  // namespace ferry
