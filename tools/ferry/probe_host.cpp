// The host side of `ferry info`: build features, CPUs, NUMA nodes, memory.
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/config.hpp"
#include "probes.hpp"

namespace ferry::tools {

namespace {

using json = nlohmann::ordered_json;

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

// The value of "key: value" lines, as in /proc/cpuinfo and /proc/meminfo.
std::optional<std::string> field(const std::string& line, std::string_view key) {
  const auto colon = line.find(':');
  if (colon == std::string::npos || trim(std::string_view(line).substr(0, colon)) != key) return std::nullopt;
  return trim(std::string_view(line).substr(colon + 1));
}

// "/proc/meminfo" reports kB; the values are KiB.
std::optional<std::uint64_t> meminfo_bytes(const std::filesystem::path& file, std::string_view key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    // NUMA nodes prefix their lines with "Node N ".
    if (line.starts_with("Node ")) line = line.substr(line.find(' ', 5) + 1);
    if (auto value = field(line, key)) return std::stoull(*value) * 1024;
  }
  return std::nullopt;
}

std::string read_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

json numa_nodes() {
  const std::filesystem::path root = "/sys/devices/system/node";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return nullptr;
  std::vector<int> ids;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.starts_with("node") &&
        std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      ids.push_back(std::stoi(name.substr(4)));
  }
  std::sort(ids.begin(), ids.end());
  json nodes = json::array();
  for (int id : ids) {
    const auto dir = root / ("node" + std::to_string(id));
    json node = {{"node", id}, {"cpus", read_line(dir / "cpulist")}};
    if (auto total = meminfo_bytes(dir / "meminfo", "MemTotal")) node["memory_bytes"] = *total;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

json probe_build() { return {{"version", config::version}, {"cuda", config::with_cuda}}; }

json probe_cpu() {
  json cpu;
  std::string model;
  int processors = 0;
  std::ifstream in("/proc/cpuinfo");
  if (!in) {
    cpu["error"] = "cannot read /proc/cpuinfo";
  }
  for (std::string line; std::getline(in, line);) {
    if (field(line, "processor")) ++processors;
    // x86 says "model name"; many ARM kernels only "Hardware" or "CPU part".
    for (std::string_view key : {"model name", "Hardware", "CPU part"})
      if (auto value = field(line, key); value && model.empty()) model = *value;
  }
  cpu["model"] = model.empty() ? "unknown" : model;
  cpu["logical_cores"] = processors;
  cpu["hardware_concurrency"] = std::thread::hardware_concurrency();
  // Containers and taskset often allow fewer CPUs than the machine has.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpu["usable_cores"] = CPU_COUNT(&set);
  cpu["numa_nodes"] = numa_nodes();
  return cpu;
}

json probe_memory() {
  json memory;
  const auto total = meminfo_bytes("/proc/meminfo", "MemTotal");
  const auto available = meminfo_bytes("/proc/meminfo", "MemAvailable");
  if (total) memory["total_bytes"] = *total;
  if (available) memory["available_bytes"] = *available;
  if (!total || !available) memory["error"] = "cannot read MemTotal/MemAvailable from /proc/meminfo";
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    memory["memlock_error"] = "getrlimit(RLIMIT_MEMLOCK) failed";
  } else if (limit.rlim_cur == RLIM_INFINITY) {
    memory["memlock_limit_bytes"] = nullptr;  // unlimited
  } else {
    memory["memlock_limit_bytes"] = static_cast<std::uint64_t>(limit.rlim_cur);
  }
  return memory;
}

}  // namespace ferry::tools
