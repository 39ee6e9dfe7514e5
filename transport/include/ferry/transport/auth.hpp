// Authentication between a runtime and ferryd: a pre-shared token and an
// HMAC challenge-response. The token itself never crosses the
// wire: the server sends a fresh nonce, the client answers with
// HMAC-SHA-256 keyed by SHA-256(token) over nonce || client name, so a
// recorded answer is useless against the next nonce.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ferry::transport {

using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// The token in `path`, without one trailing newline (files written by
// `echo` end in one). Throws ferry::Error naming the file when it is missing,
// unreadable or empty; warns when others than its owner may read it.
std::string read_token_file(const std::filesystem::path& path);

// Cryptographically random (libsodium randombytes).
Nonce random_nonce();

Mac auth_mac(std::string_view token, const Nonce& nonce, std::string_view client_name);

// In constant time, so the comparison leaks nothing about the expected MAC.
bool verify_mac(std::string_view token, const Nonce& nonce, std::string_view client_name, const Mac& mac);

}  // namespace ferry::transport
