// Performance models: per (kernel, device key), per size bucket, a ring of
// recent run times. Medians rather than means, so that one hiccup (a page
// fault storm, a preempted thread) cannot make a fast device look slow.
#include "ferry/runtime/perf_model.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry {

namespace fs = std::filesystem;

const char* to_string(Estimate::Source source) noexcept {
  switch (source) {
    case Estimate::Source::history: return "history";
    case Estimate::Source::regression: return "regression";
    case Estimate::Source::hint: return "hint";
    case Estimate::Source::probe: return "probe";
  }
  return "?";
}

unsigned size_bucket(std::size_t bytes) noexcept {
  if (bytes <= 1) return 0;
  return static_cast<unsigned>(std::bit_width(bytes) - 1);
}

namespace {

constexpr int file_version = 1;

double median_in_place(std::vector<double>& v);  // reorders v
double median(std::vector<double> v) { return median_in_place(v); }

// Bounded history: once full, a new run replaces the oldest.
class Ring {
 public:
  void push(double seconds, std::size_t capacity) {
    if (capacity == 0) return;
    if (values_.size() < capacity) {
      values_.push_back(seconds);
    } else {
      values_[next_] = seconds;
      next_ = (next_ + 1) % values_.size();
    }
    ++stale_;
  }
  // The median and the median absolute deviation from it. Estimates run for
  // every task (placement, ferryd's inline choice) and so do records: the
  // summary is recomputed once an eighth of the window is new, every run
  // while the window is under eight runs, as one more run of many barely
  // moves a median.
  struct Summary {
    double median = 0;
    double deviation = 0;
  };
  const Summary& summary() const {
    if (!summary_ || stale_ * 8 >= values_.size()) {
      Summary s;
      scratch_.assign(values_.begin(), values_.end());
      s.median = median_in_place(scratch_);
      for (double& v : scratch_) v = std::abs(v - s.median);  // their order no longer matters
      s.deviation = median_in_place(scratch_);
      summary_ = s;
      stale_ = 0;
    }
    return *summary_;
  }
  std::size_t size() const noexcept { return values_.size(); }
  // Oldest first, so that a save/load round trip keeps which runs are recent.
  std::vector<double> ordered() const {
    std::vector<double> out(values_.begin() + static_cast<std::ptrdiff_t>(next_), values_.end());
    out.insert(out.end(), values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(next_));
    return out;
  }
  const std::vector<double>& values() const noexcept { return values_; }

 private:
  std::vector<double> values_;
  std::size_t next_ = 0;  // index of the oldest once full
  // Callers hold PerfModels::Impl::mutex, estimates included.
  mutable std::optional<Summary> summary_;
  mutable std::size_t stale_ = 0;  // runs pushed since summary_
  mutable std::vector<double> scratch_;  // summary()'s, kept: no allocation per summary
};

double median_in_place(std::vector<double>& v) {
  if (v.empty()) return 0;
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

using Buckets = std::map<unsigned, Ring>;
using Key = std::pair<std::string, std::string>;  // kernel, device key
using KeyView = std::pair<std::string_view, std::string_view>;

// Looks models up without building key strings: record() runs for every task.
struct KeyLess {
  using is_transparent = void;
  static KeyView view(const Key& k) noexcept { return {k.first, k.second}; }
  static KeyView view(const KeyView& k) noexcept { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const noexcept {
    return view(a) < view(b);
  }
};

// Buckets are powers of two; the middle of [2^b, 2^(b+1)) on a log scale.
double representative_bytes(unsigned bucket) { return std::exp2(static_cast<double>(bucket) + 0.5); }

Estimate from_history(const Ring& ring, std::size_t calibrated_after) {
  const auto [med, deviation] = ring.summary();
  const double relative_spread = med > 0 ? deviation / med : 0;
  const double n = static_cast<double>(ring.size());
  const double enough = static_cast<double>(std::max<std::size_t>(calibrated_after, 1));
  const double count_term = 1 - std::exp(-n / enough);
  const double spread_term = 1 / (1 + 2 * relative_spread);
  return {med, Estimate::Source::history, ring.size(), std::clamp(count_term * spread_term, 0.0, 1.0),
          ring.size() >= calibrated_after};
}

// A power law (time = a * bytes^k) through the measured buckets' medians.
Estimate from_regression(const Buckets& buckets, std::size_t bytes) {
  std::vector<std::pair<double, double>> points;  // log bytes, log seconds
  std::size_t samples = 0;
  for (const auto& [bucket, ring] : buckets) {
    const double med = ring.summary().median;
    if (ring.size() == 0 || med <= 0) continue;
    points.emplace_back(std::log(representative_bytes(bucket)), std::log(med));
    samples += ring.size();
  }
  const double x = std::log(static_cast<double>(std::max<std::size_t>(bytes, 1)));
  if (points.size() == 1) {
    // One size seen: assume time proportional to size, the common case for kernels that stream memory.
    const double seconds = std::exp(points[0].second + x - points[0].first);
    return {seconds, Estimate::Source::regression, samples, 0.1, false};
  }
  double mx = 0, my = 0;
  for (const auto& [px, py] : points) mx += px, my += py;
  mx /= static_cast<double>(points.size());
  my /= static_cast<double>(points.size());
  double sxy = 0, sxx = 0;
  for (const auto& [px, py] : points) sxy += (px - mx) * (py - my), sxx += (px - mx) * (px - mx);
  // No kernel gets faster on more data; a negative slope is noise (launch
  // overhead at small sizes) and would extrapolate to absurdly fast large calls.
  const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  const double seconds = std::exp(my + slope * (x - mx));
  return {seconds, Estimate::Source::regression, samples, 0.25, false};
}

Estimate from_hint(const Cost& hint, const DevicePeak& peak) {
  const double compute = peak.flops_per_second > 0 ? hint.flops / peak.flops_per_second : 0;
  const double memory = peak.bytes_per_second > 0 ? hint.bytes / peak.bytes_per_second : 0;
  return {peak.launch_seconds + std::max(compute, memory),
          peak.measured ? Estimate::Source::probe : Estimate::Source::hint, 0, 0, false};
}

bool valid_seconds(double s) { return std::isfinite(s) && s >= 0; }

// Readable and unique: characters outside [A-Za-z0-9._-] become %XX, so
// "gemm" on "cpu-2t" is gemm@cpu-2t.json and no key can name a path.
std::string encode(const std::string& text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  return out;
}

fs::path file_for(const fs::path& dir, const Key& key) {
  return dir / (encode(key.first) + "@" + encode(key.second) + ".json");
}

struct LoadedFile {
  Key key;
  std::map<unsigned, std::vector<double>> buckets;
};

// Throws (anything) on a file that is not ours; the caller turns that into a warning.
LoadedFile parse_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open");
  const auto doc = nlohmann::json::parse(in);
  if (!doc.is_object() || doc.value("version", 0) != file_version)
    throw Error(fmt::format("not a version {} performance model", file_version));
  LoadedFile file{{doc.at("kernel").get<std::string>(), doc.at("device_key").get<std::string>()}, {}};
  for (const auto& [name, runs] : doc.at("buckets").items()) {
    unsigned bucket = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), bucket);
    if (ec != std::errc{} || end != name.data() + name.size() || bucket >= 64)
      throw Error(fmt::format("bad bucket '{}'", name));
    auto& values = file.buckets[bucket];
    for (const auto& run : runs) {
      const double s = run.get<double>();
      if (!valid_seconds(s)) throw Error(fmt::format("bad run time in bucket {}", bucket));
      values.push_back(s);
    }
  }
  return file;
}

void write_atomically(const fs::path& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  // Unique per process and call, so concurrent savers never share a temp file.
  fs::path temp = path;
  temp += fmt::format(".tmp.{}.{}", ::getpid(), counter.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw Error(fmt::format("cannot write performance model {}", temp.string()));
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw Error(fmt::format("cannot write performance model {}: {}", path.string(), ec.message()));
  }
}

}  // namespace

struct PerfModels::Impl {
  Options options;
  mutable std::mutex mutex;
  std::map<Key, Buckets, KeyLess> models;  // never erased from: a node found stays valid
  // The ring record() pushed to last: a run of tasks of one kernel on one
  // device (every task records) finds it with two string compares instead
  // of a search of the map and of its buckets.
  struct Last {
    const Key* key = nullptr;
    unsigned bucket = 0;
    Ring* ring = nullptr;
  } last;
};

PerfModels::PerfModels(Options options) : impl_(std::make_unique<Impl>()) { impl_->options = options; }
PerfModels::~PerfModels() = default;

Estimate PerfModels::estimate(const std::string& kernel, const std::string& device_key, std::size_t bytes,
                              const Cost& hint, const DevicePeak& peak) const {
  std::lock_guard lock(impl_->mutex);
  const auto model = impl_->models.find(KeyView{kernel, device_key});
  if (model == impl_->models.end()) return from_hint(hint, peak);
  const Buckets& buckets = model->second;
  if (const auto it = buckets.find(size_bucket(bytes)); it != buckets.end() && it->second.size() > 0)
    return from_history(it->second, impl_->options.calibrated_after);
  const bool any_measured = std::any_of(buckets.begin(), buckets.end(), [](const auto& b) {
    return b.second.size() > 0 && b.second.summary().median > 0;
  });
  if (any_measured) return from_regression(buckets, bytes);
  return from_hint(hint, peak);
}

void PerfModels::record(const std::string& kernel, const std::string& device_key, std::size_t bytes,
                        double seconds) {
  if (!valid_seconds(seconds)) return;
  const unsigned bucket = size_bucket(bytes);
  std::lock_guard lock(impl_->mutex);
  Impl::Last& last = impl_->last;
  if (last.ring == nullptr || last.bucket != bucket || last.key->first != kernel || last.key->second != device_key) {
    auto model = impl_->models.find(KeyView{kernel, device_key});
    if (model == impl_->models.end()) model = impl_->models.emplace(Key{kernel, device_key}, Buckets{}).first;
    last = {&model->first, bucket, &model->second[bucket]};
  }
  last.ring->push(seconds, impl_->options.history);
}

void PerfModels::load(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;  // nothing learned yet
  std::vector<LoadedFile> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto& path = entry.path();
    if (path.extension() != ".json" || !entry.is_regular_file(ec)) continue;
    try {
      files.push_back(parse_file(path));
    } catch (const std::exception& e) {
      log().warn("skipping performance model {}: {}", path.string(), e.what());
    }
  }
  if (ec) log().warn("reading performance models in {}: {}", dir.string(), ec.message());
  std::lock_guard lock(impl_->mutex);
  for (const auto& file : files) {
    auto& buckets = impl_->models[file.key];
    for (const auto& [bucket, values] : file.buckets)
      for (double s : values) buckets[bucket].push(s, impl_->options.history);
  }
}

void PerfModels::save(const fs::path& dir) const {
  std::vector<std::pair<Key, nlohmann::json>> docs;
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& [key, buckets] : impl_->models) {
      nlohmann::json runs = nlohmann::json::object();
      for (const auto& [bucket, ring] : buckets)
        if (ring.size() > 0) runs[std::to_string(bucket)] = ring.ordered();
      if (runs.empty()) continue;
      docs.emplace_back(key, nlohmann::json{
                                 {"version", file_version},
                                 {"kernel", key.first},
                                 {"device_key", key.second},
                                 {"buckets", std::move(runs)},
                             });
    }
  }
  if (docs.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create performance model directory {}: {}", dir.string(), ec.message()));
  for (const auto& [key, doc] : docs) write_atomically(file_for(dir, key), doc.dump(1) + "\n");
}

fs::path PerfModels::default_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return fs::path(xdg) / "ferry" / "perfmodels";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return fs::path(home) / ".cache" / "ferry" / "perfmodels";
  return "/tmp/ferry-perfmodels";
}

std::vector<PerfModels::BucketSummary> PerfModels::summary() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<BucketSummary> out;
  for (const auto& [key, buckets] : impl_->models)
    for (const auto& [bucket, ring] : buckets)
      if (ring.size() > 0) out.push_back({key.first, key.second, bucket, ring.size(), median(ring.values())});
  return out;
}

}  // namespace ferry
