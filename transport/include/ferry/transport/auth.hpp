// Authentication between a runtime and ferryd: a pre-shared token and an
// HMAC challenge-response. The token itself never crosses the
// wire: the server sends a fresh nonce, the client answers with
// HMAC-SHA-256 keyed by SHA-256(token) over nonce || client name, so a
// recorded answer is useless against the next nonce.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ferry::transport {

using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// Shorter tokens are refused: a token is the only secret in token mode.
inline constexpr std::size_t min_token_bytes = 16;

// The token in `path`, without one trailing line ending ("\n", "\r\n" or
// "\r": files written by `echo` or a Windows editor end in one). Throws
// ferry::Error naming the file when it is missing, unreadable, empty,
// shorter than min_token_bytes, or writable by its group or others; warns
// when others than its owner may read it.
std::string read_token_file(const std::filesystem::path& path);

// SHA-256 of `data` as 64 lowercase hex digits (for audit records).
std::string sha256_hex(std::string_view data);

// Cryptographically random (libsodium randombytes).
Nonce random_nonce();

Mac auth_mac(std::string_view token, const Nonce& nonce, std::string_view client_name);

// In constant time, so the comparison leaks nothing about the expected MAC.
bool verify_mac(std::string_view token, const Nonce& nonce, std::string_view client_name, const Mac& mac);

}  // namespace ferry::transport
