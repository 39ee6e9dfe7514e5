// ferryd's audit log (--audit-log FILE): one JSON object per line for every
// connection, authentication, kernel definition, task, quota refusal and
// disconnection, so an operator can say afterwards who ran what on the GPU
// host. The schema is in docs/security.md. Thread-safe: sessions write from
// the progress thread, task completions from the runtime's workers.
#pragma once

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>

namespace ferry::ferryd {

class AuditLog {
 public:
  AuditLog() = default;  // off: record() does nothing
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends to `path` (made with mode 0600). Throws ferry::Error naming the
  // file when it cannot be opened.
  void open(const std::filesystem::path& path);
  // Opens the file again by its name, after logrotate moved it (SIGHUP).
  // A failure is logged and the old file kept.
  void reopen();
  bool enabled() const;

  // Writes {"time": ..., "event": event, ...fields} as one line, flushed.
  void record(std::string_view event, nlohmann::json fields);

 private:
  mutable std::mutex mutex_;
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ferry::ferryd
