// How long a kernel takes on a device, learned from measured runs.
// One model per (kernel, device key); within it, a history per size bucket
// (powers of two of the bytes a call touches). Estimates are robust to
// outliers (medians of recent runs), carry their confidence, fall back to a
// regression over the measured buckets for unseen sizes, and before any run to
// the kernel's cost hint over the device's peak rates (measured by a device
// probe where one ran: source "probe").
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ferry/runtime/kernel.hpp"

namespace ferry {

// A device's peak rates, to turn a cost hint into seconds: measured by a
// short device probe where one ran (the CPU's timed dgemm and daxpy; a
// remote host's own probe, told at connect), otherwise from fixed figures
// or the device's data sheet.
struct DevicePeak {
  double flops_per_second = 1e9;
  double bytes_per_second = 1e9;
  double launch_seconds = 1e-6;  // fixed overhead per task
  bool measured = false;         // the rates come from a probe
};

struct Estimate {
  // hint: the kernel's cost hint over fixed peak rates; probe: over measured ones.
  enum class Source : std::uint8_t { history, regression, hint, probe };
  double seconds = 0;
  Source source = Source::hint;
  std::size_t samples = 0;  // measured runs behind it (in its bucket, or in all for regression)
  double confidence = 0;    // 0: a guess from the hint .. 1: many consistent runs
  // Enough runs in this size bucket that the scheduler need not explore it further.
  bool calibrated = false;
};
const char* to_string(Estimate::Source source) noexcept;

// Bucket of a call touching `bytes`: floor(log2(bytes)), 0 for 0 or 1 byte.
unsigned size_bucket(std::size_t bytes) noexcept;

class PerfModels {
 public:
  struct Options {
    std::size_t history = 32;        // runs kept per bucket
    std::size_t calibrated_after = 3;  // runs per bucket before exploration stops
  };

  PerfModels() : PerfModels(Options{}) {}
  explicit PerfModels(Options options);
  ~PerfModels();

  // Thread-safe.
  Estimate estimate(const std::string& kernel, const std::string& device_key, std::size_t bytes, const Cost& hint,
                    const DevicePeak& peak) const;
  void record(const std::string& kernel, const std::string& device_key, std::size_t bytes, double seconds);

  // One JSON file per (kernel, device key) in `dir`; load merges, save overwrites.
  // A corrupt or foreign file is skipped with a warning, never fatal.
  void load(const std::filesystem::path& dir);
  void save(const std::filesystem::path& dir) const;
  // $XDG_CACHE_HOME/ferry/perfmodels (or ~/.cache/ferry/perfmodels).
  static std::filesystem::path default_dir();

  struct BucketSummary {
    std::string kernel, device_key;
    unsigned bucket = 0;
    std::size_t samples = 0;
    double median_seconds = 0;
  };
  std::vector<BucketSummary> summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
