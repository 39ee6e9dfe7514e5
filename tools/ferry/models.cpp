#include "models.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <utility>

#include "ferry/error.hpp"
#include "ferry/runtime/perf_model.hpp"

namespace ferry::tools {
namespace {

namespace fs = std::filesystem;

fs::path models_dir(const ModelsOptions& options) {
  if (!options.dir.empty()) return options.dir;
  if (const char* dir = std::getenv("FERRY_PERFMODEL_DIR")) return dir;
  return PerfModels::default_dir();
}

// PerfModels names each file "<kernel>@<device key>.json" with bytes outside
// [A-Za-z0-9._-] written as %XX.
std::pair<std::string, std::string> key_of(const fs::path& file) {
  const std::string stem = file.stem().string();
  const auto decode = [](std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '%' && i + 2 < text.size()) {
        out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  };
  const auto at = stem.find('@');
  if (at == std::string::npos) return {};
  return {decode(std::string_view(stem).substr(0, at)), decode(std::string_view(stem).substr(at + 1))};
}

std::string seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string bucket_bytes(unsigned bucket) {
  const double bytes = static_cast<double>(std::uint64_t{1} << std::min(bucket, 62u));
  if (bytes >= 1 << 30) return fmt::format("{:.0f} GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:.0f} MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return fmt::format("{:.0f} KiB", bytes / (1 << 10));
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace

int run_models(const ModelsOptions& options) {
  const fs::path dir = models_dir(options);
  const auto wanted = [&](const std::string& kernel, const std::string& device) {
    return (options.kernel.empty() || kernel == options.kernel) && (options.device.empty() || device == options.device);
  };

  if (options.action == "reset") {
    std::size_t removed = 0;
    std::error_code ec;
    if (fs::is_directory(dir, ec))
      for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".json") continue;
        const auto [kernel, device] = key_of(entry.path());
        if (!kernel.empty() && wanted(kernel, device) && fs::remove(entry.path(), ec)) ++removed;
      }
    fmt::print("removed {} model{} from {}\n", removed, removed == 1 ? "" : "s", dir.string());
    return EXIT_SUCCESS;
  }

  PerfModels models;
  models.load(dir);
  if (options.action == "show" && options.kernel.empty()) throw UsageError("ferry models show: name a kernel");
  // kernel -> device -> buckets
  std::map<std::string, std::map<std::string, std::vector<PerfModels::BucketSummary>>> by_kernel;
  for (const auto& b : models.summary())
    if (wanted(b.kernel, b.device_key)) by_kernel[b.kernel][b.device_key].push_back(b);
  if (by_kernel.empty()) {
    fmt::print("no models{} in {}\n", options.kernel.empty() ? "" : " of kernel " + options.kernel, dir.string());
    return options.action == "show" ? EXIT_FAILURE : EXIT_SUCCESS;
  }
  fmt::print("models in {}\n", dir.string());
  for (const auto& [kernel, devices] : by_kernel) {
    for (const auto& [device, buckets] : devices) {
      std::size_t runs = 0;
      for (const auto& b : buckets) runs += b.samples;
      if (options.action == "list") {
        fmt::print("  {:<16} {:<40} {:>3} sizes, {:>5} runs\n", kernel, device, buckets.size(), runs);
        continue;
      }
      fmt::print("{} on {}:\n", kernel, device);
      for (const auto& b : buckets)
        fmt::print("  from {:>8}: median {:>10} over {} runs\n", bucket_bytes(b.bucket), seconds(b.median_seconds),
                   b.samples);
    }
  }
  return EXIT_SUCCESS;
}

}  // namespace ferry::tools
