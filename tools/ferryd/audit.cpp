#include "audit.hpp"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::ferryd {
namespace {

std::FILE* open_append(const std::filesystem::path& path) {
  // 0600: the log names clients, their addresses and their kernels.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("audit log {}: cannot be opened: {}", path.string(), std::strerror(errno)));
  std::FILE* file = ::fdopen(fd, "a");
  if (file == nullptr) {
    ::close(fd);
    throw Error(fmt::format("audit log {}: cannot be opened: {}", path.string(), std::strerror(errno)));
  }
  return file;
}

// RFC 3339 in UTC with milliseconds: "2026-11-24T03:04:05.678Z".
std::string now_utc() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", fmt::gmtime(std::chrono::system_clock::to_time_t(now)), ms);
}

}  // namespace

AuditLog::~AuditLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void AuditLog::open(const std::filesystem::path& path) {
  std::FILE* file = open_append(path);
  std::lock_guard lock(mutex_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = file;
  path_ = path;
}

void AuditLog::reopen() {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  try {
    std::FILE* file = open_append(path_);
    std::fclose(file_);
    file_ = file;
    log().info("audit log {} reopened", path_.string());
  } catch (const Error& e) {
    log().error("{}; still writing to the file open before", e.what());
  }
}

bool AuditLog::enabled() const {
  std::lock_guard lock(mutex_);
  return file_ != nullptr;
}

void AuditLog::record(std::string_view event, nlohmann::json fields) {
  {
    std::lock_guard lock(mutex_);
    if (file_ == nullptr) return;
  }
  nlohmann::json line = {{"time", now_utc()}, {"event", event}};
  line.update(fields);
  // A client's strings need not be UTF-8; replaced, they still make valid JSON.
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text += '\n';
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
    log().error("audit log {}: write failed: {}", path_.string(), std::strerror(errno));
}

}  // namespace ferry::ferryd
