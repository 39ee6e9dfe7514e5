// Names for devices and memory nodes, and the placement a user may pin a task to.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

enum class DeviceKind : std::uint8_t { cpu, cuda, remote };
const char* to_string(DeviceKind kind) noexcept;

using DeviceId = std::uint32_t;
// Memory node 0 is the host; each GPU (local or remote) adds one.
using MemoryNodeId = std::uint32_t;
inline constexpr MemoryNodeId host_node = 0;

// Where a task may run: any device, a kind of device, or one named device.
struct Place {
  enum class Kind : std::uint8_t { any, cpu, gpu, remote } kind = Kind::any;
  int index = -1;         // gpu(k): the local GPU ordinal
  std::string endpoint;   // remote("host:port"); empty: any remote
  std::string describe() const;
};

inline Place anywhere() { return {}; }
inline Place cpu() { return {Place::Kind::cpu, -1, {}}; }
inline Place gpu(int index = -1) { return {Place::Kind::gpu, index, {}}; }
inline Place remote(std::string endpoint = {}) { return {Place::Kind::remote, -1, std::move(endpoint)}; }

}  // namespace ferry
