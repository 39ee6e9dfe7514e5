#include "ferry/transport/known_hosts.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::transport {
namespace {

// The pinned key for `address`; bad lines are skipped with a warning naming them.
std::optional<PublicKey> pinned(const std::filesystem::path& file, const std::string& address) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string host, type, base64;
    if (!(words >> host) || host.front() == '#' || host != address) continue;
    words >> type >> base64;
    try {
      if (type != public_key_type) throw UsageError(fmt::format("key type '{}', expected {}", type, public_key_type));
      return parse_public_key(base64);
    } catch (const UsageError& e) {
      log().warn("known hosts {}:{}: {}; line ignored", file.string(), number, e.what());
    }
  }
  return std::nullopt;
}

void append(const std::filesystem::path& file, const std::string& address, const PublicKey& key) {
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("known hosts {}: {}", file.string(), std::strerror(errno)));
  const std::string line = fmt::format("{} {}\n", address, public_key_line(key, ""));
  // One write of a whole line: processes pinning at once do not interleave.
  ::flock(fd, LOCK_EX);
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) throw Error(fmt::format("known hosts {}: cannot append", file.string()));
}

}  // namespace

void check_host_key(const std::filesystem::path& file, const std::string& address, const PublicKey& key,
                    Pinning pinning) {
  if (auto expected = pinned(file, address)) {
    if (*expected == key) return;
    throw RemoteError(fmt::format(
        "ferryd at {} presented host key {}, but {} pins {} for it: refused (a man in the middle, or a server "
        "whose key changed; if the change is expected, remove its line from {})",
        address, fingerprint(key), file.string(), fingerprint(*expected), file.string()));
  }
  // The line to add is printed so that the operator need not build it; it
  // is only to be added once the fingerprint is checked against the one
  // ferryd logs (or its FILE.pub), or strict checking proves nothing.
  if (pinning == Pinning::strict)
    throw RemoteError(fmt::format("ferryd at {} presented host key {}, which {} does not pin (strict checking): "
                                  "refused. If that is the fingerprint ferryd logs at start (or its --host-key "
                                  "FILE.pub holds this key), add this line to {}: {} {}",
                                  address, fingerprint(key), file.string(), file.string(), address,
                                  public_key_line(key, "")));
  append(file, address, key);
  log().info("pinned ferryd at {}: host key {} (first use) in {}", address, fingerprint(key), file.string());
}

bool host_key_listed(const std::filesystem::path& file, const PublicKey& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string host, type, base64;
    if (!(words >> host >> type >> base64) || host.front() == '#' || type != public_key_type) continue;
    try {
      if (parse_public_key(base64) == key) return true;
    } catch (const UsageError&) {
      // a bad line pins nothing (check_host_key warns about it)
    }
  }
  return false;
}

}  // namespace ferry::transport
