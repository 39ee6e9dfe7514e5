// The machine a benchmark ran on, for its JSON context: host, CPU model,
// core count, kernel.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <string>

namespace ferry::bench {

inline std::string machine() {
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  ::uname(&u);
  return fmt::format("{} {} ({}, {} CPUs, Linux {})", u.nodename, u.machine, model, ::sysconf(_SC_NPROCESSORS_ONLN),
                     u.release);
}

// CPU time all of this machine's cores spent busy so far (every process and
// the kernel's own work, softirqs included), in core-seconds, from /proc/stat;
// 0 where it cannot be read. Differences of it say how much CPU a run cost
// the machine, beside how long it took.
inline double busy_core_seconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return 0;
  return (user + nice + system + irq + softirq) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace ferry::bench
