#include "same_host.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace ferry::transport {
namespace {

// An address as /proc/net/tcp prints it: the raw 32-bit words in hex
// (so host byte order of the stored bytes), a colon, the port in hex.
std::string proc_address(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    return fmt::format("{:08X}:{:04X}", in.sin_addr.s_addr, ntohs(in.sin_port));
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
  std::uint32_t words[4];
  std::memcpy(words, &in6.sin6_addr, sizeof words);
  return fmt::format("{:08X}{:08X}{:08X}{:08X}:{:04X}", words[0], words[1], words[2], words[3], ntohs(in6.sin6_port));
}

bool is_loopback_address(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr) >> 24) == 127;
  if (address.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) != 0 ||
           (IN6_IS_ADDR_V4MAPPED(&a) != 0 && a.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

namespace {

// The /proc/net/tcp{,6} row of the other end of the connected TCP socket
// `fd`, when that end is on this host's loopback.
struct PeerSocket {
  uid_t uid = 0;
  unsigned long inode = 0;
};

std::optional<PeerSocket> loopback_peer(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t mine_bytes = sizeof mine, theirs_bytes = sizeof theirs;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_bytes) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_bytes) != 0 || !is_loopback_address(theirs))
    return std::nullopt;
  // The peer's socket is the row whose local end is their address and whose remote end is ours.
  const std::string local = proc_address(theirs), remote = proc_address(mine);
  std::ifstream table(theirs.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6");
  std::string line;
  std::getline(table, line);  // the column names
  while (std::getline(table, line)) {
    std::istringstream row(line);
    std::string slot, row_local, row_remote, state, queues, timer, retransmits, timeout;
    PeerSocket peer;
    if (!(row >> slot >> row_local >> row_remote >> state >> queues >> timer >> retransmits >> peer.uid >> timeout >>
          peer.inode))
      continue;
    if (row_local == local && row_remote == remote) return peer;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uid_t> loopback_peer_uid(int fd) {
  const auto peer = loopback_peer(fd);
  return peer ? std::optional<uid_t>(peer->uid) : std::nullopt;
}

bool loopback_peer_is_process(int fd, pid_t pid) {
  if (pid <= 0) return false;
  const auto peer = loopback_peer(fd);
  if (!peer || peer->inode == 0) return false;
  const std::string socket = fmt::format("socket:[{}]", peer->inode);
  // Readable only for this user's processes (or by root), as the lane needs anyway.
  try {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
      std::error_code link_error;
      const auto target = std::filesystem::read_symlink(entry.path(), link_error);
      if (!link_error && target.native() == socket) return true;
    }
  } catch (const std::filesystem::filesystem_error&) {
    // It went away while listed: not the peer now.
  }
  return false;
}

bool shared_memory_lane_possible(int fd, const std::string& transports) {
  const char* setting = std::getenv("FERRY_SHARED_MEMORY");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
  const bool shared_memory =
      transports.find("sysv") != std::string::npos || transports.find("posix") != std::string::npos;
  // CMA on an endpoint without error handling aborts the process when the peer dies (worker.cpp).
  if (!shared_memory || transports.find("cma") != std::string::npos) return false;
  const auto uid = loopback_peer_uid(fd);
  return uid && *uid == ::geteuid();
}

protocol::Lane lane_to_offer(int fd, const std::string& transports, bool shared_memory) {
  if (shared_memory && shared_memory_lane_possible(fd, transports)) return protocol::Lane::shared_memory;
  const char* setting = std::getenv("FERRY_BULK_LANES");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return protocol::Lane::none;
  return protocol::Lane::bulk;
}

}  // namespace ferry::transport
