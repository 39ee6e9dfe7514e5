#include "ferry/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry {

namespace {

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

std::optional<std::int64_t> read_int(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return std::nullopt;
  return parse_int(text);
}

std::optional<std::string> read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  return line;
}

struct CgroupMount {
  std::filesystem::path point;
  std::string root;  // the cgroup this mount shows at its top ("/" with a cgroup namespace)
};

// Where the cgroup v2 hierarchy and v1's cpu controller are mounted, from
// /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT POINT OPTIONS ... - TYPE SOURCE SUPER".
void find_mounts(std::optional<CgroupMount>& v2, std::optional<CgroupMount>& v1_cpu) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, word;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> word && word != "-") {
    }
    std::string type, source, super;
    fields >> type >> source >> super;
    if (type == "cgroup2" && !v2) v2 = CgroupMount{point, root};
    if (type == "cgroup" && !v1_cpu) {
      std::istringstream options(super);
      for (std::string option; std::getline(options, option, ',');)
        if (option == "cpu") v1_cpu = CgroupMount{point, root};
    }
  }
}

// The folder of `cgroup` (a path from /proc/self/cgroup) under `mount`.
std::filesystem::path folder(const CgroupMount& mount, std::string cgroup) {
  if (mount.root != "/" && cgroup.starts_with(mount.root)) cgroup.erase(0, mount.root.size());
  return mount.point / std::filesystem::path(cgroup).relative_path();
}

// The smallest quota from `dir` up to the mount point: a parent's limit binds its children.
template <typename Read>
std::optional<unsigned> smallest_up_to(std::filesystem::path dir, const std::filesystem::path& top, Read read) {
  std::optional<unsigned> smallest;
  for (;;) {
    if (const auto cpus = read(dir); cpus) smallest = std::min(smallest.value_or(*cpus), *cpus);
    if (dir == top || !dir.has_relative_path() || dir.parent_path() == dir) break;
    if (dir.string().size() <= top.string().size()) break;
    dir = dir.parent_path();
  }
  return smallest;
}

std::optional<unsigned> cgroup_cpu_limit() {
  std::optional<CgroupMount> v2, v1_cpu;
  find_mounts(v2, v1_cpu);
  std::optional<unsigned> limit;
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::optional<unsigned> cpus;
    if (controllers.empty() && v2) {
      cpus = smallest_up_to(folder(*v2, path), v2->point, [](const std::filesystem::path& dir) {
        const auto text = read_line(dir / "cpu.max");
        return text ? cpus_from_cpu_max(*text) : std::nullopt;
      });
    } else if (v1_cpu && ("," + controllers + ",").find(",cpu,") != std::string::npos) {
      cpus = smallest_up_to(folder(*v1_cpu, path), v1_cpu->point, [](const std::filesystem::path& dir) {
        const auto quota = read_int(dir / "cpu.cfs_quota_us");
        const auto period = read_int(dir / "cpu.cfs_period_us");
        return quota && period ? cpus_from_quota(*quota, *period) : std::nullopt;
      });
    }
    if (cpus) limit = std::min(limit.value_or(*cpus), *cpus);
  }
  return limit;
}

}  // namespace

std::optional<unsigned> cpus_from_quota(std::int64_t quota, std::int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<unsigned>(std::max<std::int64_t>(1, (quota + period - 1) / period));
}

std::optional<unsigned> cpus_from_cpu_max(std::string_view text) {
  const auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota_text = text.substr(0, space);
  if (quota_text == "max") return std::nullopt;
  auto period_text = text.substr(space + 1);
  while (!period_text.empty() && (period_text.back() == '\n' || period_text.back() == ' ')) period_text.remove_suffix(1);
  const auto quota = parse_int(quota_text);
  const auto period = parse_int(period_text);
  if (!quota || !period) return std::nullopt;
  return cpus_from_quota(*quota, *period);
}

unsigned available_cpus() {
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  if (const auto limit = cgroup_cpu_limit()) cpus = std::min(cpus, *limit);
  return std::max(1u, cpus);
}

}  // namespace ferry
