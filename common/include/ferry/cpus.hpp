// How many CPUs this process may use, as a container sees it: the threads a
// runtime starts by default. std::thread::hardware_concurrency() counts the
// node's cores, so a pod limited to 8 CPUs on a 96-core node would start 96
// workers that the CPU quota then throttles.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

// The CPUs in this process's affinity mask, no more than its cgroup's CPU
// quota allows (cgroup v2 cpu.max or v1 cpu.cfs_quota_us, in this cgroup or
// any above it), rounded up; at least 1.
unsigned available_cpus();

// CPUs a quota of `quota` per `period` allows, rounded up; nothing for no
// limit (a quota ≤ 0, as v1 writes -1) or a period of 0.
std::optional<unsigned> cpus_from_quota(std::int64_t quota, std::int64_t period);

// cgroup v2's cpu.max text: "QUOTA PERIOD", or "max PERIOD" for no limit.
std::optional<unsigned> cpus_from_cpu_max(std::string_view text);

}  // namespace ferry
