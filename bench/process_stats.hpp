// What a run cost the processes of a benchmark besides its wall time: CPU
// seconds and voluntary context switches, of this process and of another
// (the ferryd a remote benchmark drives). Unlike a time, these counts barely
// move with how loaded the machine is.
#pragma once

#include <fmt/format.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace ferry::bench {

// CPU seconds this process has run so far, every thread's (getrusage: to
// the microsecond, where /proc's tick counts would round a whole run of
// small tasks to a few 10 ms ticks).
inline double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// CPU seconds the live threads of process `pid` have run so far, from each
// one's /proc/PID/task/TID/schedstat (nanoseconds); -1 when unreadable.
inline double process_cpu_seconds(long pid) {
  if (pid <= 0) return -1;
  std::error_code ec;
  double ns = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream stat(entry.path() / "schedstat");
    double thread_ns = 0;
    if (stat >> thread_ns) ns += thread_ns;
  }
  return ec ? -1 : ns * 1e-9;
}

// Voluntary context switches so far: each one a thread that went to sleep
// and had to be woken, the hand-offs a task pays for. This process's come
// from getrusage (exited threads included), another's from its live
// threads' /proc status; -1 when unreadable.
inline long own_switches() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw;
}

inline long process_switches(long pid) {
  if (pid <= 0) return -1;
  std::error_code ec;
  long total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.starts_with("voluntary_ctxt_switches:")) total += std::stol(line.substr(24));
  }
  return ec ? -1 : total;
}

}  // namespace ferry::bench
