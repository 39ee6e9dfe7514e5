#include "pull.hpp"

#include <fmt/format.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "little_endian.hpp"

namespace ferry::transport::pull {
namespace {

constexpr std::size_t probe_bytes = 1 + 8 + std::tuple_size_v<ProbeBytes>;
constexpr std::size_t released_bytes = 1 + 8 + 1;

}  // namespace

void append(std::vector<std::byte>& out, const Descriptor& d) {
  put_le<std::uint64_t>(out, d.token);
  put_le<std::uint64_t>(out, d.address);
  put_le<std::uint64_t>(out, d.bytes);
}

std::optional<Descriptor> read_descriptor(std::span<const std::byte> header) {
  if (header.size() < descriptor_bytes) return std::nullopt;
  return Descriptor{get_le<std::uint64_t>(header.data()), get_le<std::uint64_t>(header.data() + 8),
                    get_le<std::uint64_t>(header.data() + 16)};
}

std::vector<std::byte> probe(const ProbeBytes* bytes) {
  std::vector<std::byte> out{static_cast<std::byte>(Control::probe)};
  put_le<std::uint64_t>(out, bytes == nullptr ? 0 : reinterpret_cast<std::uintptr_t>(bytes->data()));
  if (bytes == nullptr) {
    out.resize(probe_bytes);
  } else {
    out.insert(out.end(), bytes->begin(), bytes->end());
  }
  return out;
}

std::vector<std::byte> probed() { return {static_cast<std::byte>(Control::probed)}; }

std::vector<std::byte> released(std::uint64_t token, bool ok) {
  std::vector<std::byte> out{static_cast<std::byte>(Control::released)};
  put_le<std::uint64_t>(out, token);
  out.push_back(static_cast<std::byte>(ok ? 1 : 0));
  return out;
}

std::optional<ControlMessage> read_control(std::span<const std::byte> message) {
  if (message.empty()) return std::nullopt;
  ControlMessage m;
  m.kind = static_cast<Control>(message[0]);
  switch (m.kind) {
    case Control::probe:
      if (message.size() != probe_bytes) return std::nullopt;
      m.address = get_le<std::uint64_t>(message.data() + 1);
      std::memcpy(m.bytes.data(), message.data() + 9, m.bytes.size());
      return m;
    case Control::probed:
      if (message.size() != 1) return std::nullopt;
      return m;
    case Control::released:
      if (message.size() != released_bytes || std::to_integer<unsigned>(message[9]) > 1) return std::nullopt;
      m.token = get_le<std::uint64_t>(message.data() + 1);
      m.ok = message[9] == std::byte{1};
      return m;
  }
  return std::nullopt;
}

std::string read_from(pid_t pid, std::uint64_t address, void* dest, std::size_t bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<std::byte*>(dest) + done, bytes - done};
    // The sender's address as a number: it is never dereferenced here, only handed to the kernel.
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address + done)), bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fmt::format("process_vm_readv from process {}: {}", pid, std::strerror(errno));
    if (n == 0) return fmt::format("process_vm_readv from process {} read nothing", pid);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

bool enabled() {
  const char* setting = std::getenv("FERRY_PULL_PAYLOADS");
  return setting == nullptr || std::strcmp(setting, "0") != 0;
}

}  // namespace ferry::transport::pull
