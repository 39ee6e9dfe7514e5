// What both ends of the bootstrap compute alike: frames on the socket, the
// transcript each side signs, and the session keys.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/transport/protocol.hpp"
#include "ferry/transport/secure_channel.hpp"

namespace ferry::transport::handshake {

// A frame is a u32 little-endian length and that many bytes: an encoded
// message, sealed once the keys are agreed. Longer ones are malformed.
inline constexpr std::size_t max_frame_bytes = protocol::max_header_bytes + seal_overhead;
std::vector<std::byte> frame(std::span<const std::byte> body);
// The length announced by a frame's first 4 bytes.
std::uint32_t frame_length(const std::byte* prefix);

using Digest = std::array<std::uint8_t, 32>;
// What the server signs: the hello as it came and its challenge (signature zeroed).
Digest challenge_digest(std::span<const std::byte> hello, const protocol::Challenge& challenge);
// What the client proves: hello and challenge as they came, and its worker
// address (and its network address, when it sends one).
Digest auth_digest(std::span<const std::byte> hello, std::span<const std::byte> challenge,
                   std::span<const std::uint8_t> worker_address, std::span<const std::uint8_t> network_address = {});

// An ephemeral X25519 key pair (crypto_kx), wiped when it goes.
struct Exchange {
  Exchange();
  ~Exchange();
  protocol::Key public_key{};
  std::array<std::uint8_t, 32> secret{};
};
// The channel of each end from the exchange; nullptr when the peer's key is
// unusable (a low-order point).
std::unique_ptr<SecureChannel> client_channel(const Exchange& mine, const protocol::Key& server, Cipher cipher);
std::unique_ptr<SecureChannel> server_channel(const Exchange& mine, const protocol::Key& client, Cipher cipher);

// For logs: ferry::printable (control characters escaped, the length capped).
std::string printable(std::string_view text, std::size_t limit = 64);

}  // namespace ferry::transport::handshake
