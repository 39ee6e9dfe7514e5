// A number from a process's /proc/PID/status ("VmRSS" in KiB, "Threads"),
// and the descriptors and sockets it has open.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ferry::test {

inline std::uint64_t proc_status(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1));
  throw std::runtime_error("no " + field + " in /proc/" + std::to_string(pid) + "/status");
}

inline long rss_kib() { return static_cast<long>(proc_status(::getpid(), "VmRSS")); }

// Open file descriptors, less the one that lists them when it is this process's own.
inline int fds_of(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return pid == ::getpid() ? n - 1 : n;
}

inline int sockets_of(pid_t pid) {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec).string().rfind("socket:", 0) == 0;
  }
  return n;
}

}  // namespace ferry::test
