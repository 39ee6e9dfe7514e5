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

}  // namespace ferry::bench
