// Pulled payloads. Between two processes of one user on one host (a
// shared-memory lane), a large payload does not travel: the sender names it
// (its address and size in the sender's memory) and the receiver copies it
// straight out of the sender's process with process_vm_readv, then tells
// the sender it may let that memory go. One copy instead of UCX's two
// through a TCP rendezvous lane. UCX 1.13 does the same with CMA, but only
// on endpoints without error handling, where it aborts the process once the
// peer died; here a dead peer fails the one payload (ESRCH) and the control
// endpoint ends the rest.
//
// A receiver reads only a process whose id the bootstrap proved (it holds
// the other end of the bootstrap socket: loopback_peer_is_process) and
// only once that process's probe (random bytes at an address it chose)
// read back right; a sender names payloads only after its probe was read.
// Both ends are the same user, whom the kernel already lets read the other's
// memory: the pull grants nothing new.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ferry::transport::pull {

// Payloads from this size on are pulled; below it UCX's shared-memory FIFOs
// copy them eagerly at less cost than a release message.
inline constexpr std::size_t pull_from = std::size_t{64} << 10;

// What a pulled message's AM header starts with (the message's own header follows).
struct Descriptor {
  std::uint64_t token = 0;    // the sender's, named again in `released`
  std::uint64_t address = 0;  // the payload in the sender's memory
  std::uint64_t bytes = 0;
};
inline constexpr std::size_t descriptor_bytes = 24;

void append(std::vector<std::byte>& out, const Descriptor& d);
// The descriptor at the front of `header`, or nullopt when it is too short.
std::optional<Descriptor> read_descriptor(std::span<const std::byte> header);

// The pull control messages (their own AM id): what each end says about pulls.
enum class Control : std::uint8_t {
  probe = 0,     // [u64 address][16 bytes]: read these bytes of mine; address 0: I offer no pulls
  probed = 1,    // your probe read back right: name your payloads to me
  released = 2,  // [u64 token][u8 ok]: done with your payload (ok 0: I could not read it)
};
using ProbeBytes = std::array<std::byte, 16>;

std::vector<std::byte> probe(const ProbeBytes* bytes);  // null: this end offers none
std::vector<std::byte> probed();
std::vector<std::byte> released(std::uint64_t token, bool ok);

struct ControlMessage {
  Control kind = Control::probe;
  std::uint64_t address = 0;  // probe
  ProbeBytes bytes{};         // probe
  std::uint64_t token = 0;    // released
  bool ok = false;            // released
};
// Nullopt for anything malformed (a wrong size, an unknown kind).
std::optional<ControlMessage> read_control(std::span<const std::byte> message);

// Copies `bytes` from `address` in process `pid` into `dest`: an empty
// string, or what went wrong (the process is gone, the range unreadable).
std::string read_from(pid_t pid, std::uint64_t address, void* dest, std::size_t bytes);

// Whether this process offers pulls (FERRY_PULL_PAYLOADS is not "0").
bool enabled();

}  // namespace ferry::transport::pull
