// Ed25519 identities (libsodium crypto_sign): a client's key pair that
// ferryd's --authorized-keys names, and ferryd's host key that clients pin.
//
// Files: a private key is one line "ferry-ed25519-private BASE64(seed)"
// (mode 600); a public key is the line "ferry-ed25519 BASE64 COMMENT" that
// authorized-keys and known-hosts files hold.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace ferry::transport {

using PublicKey = std::array<std::uint8_t, 32>;
using Signature = std::array<std::uint8_t, 64>;

inline constexpr std::string_view public_key_type = "ferry-ed25519";

class KeyPair {
 public:
  static KeyPair generate();
  // Throws ferry::Error naming the file when it is missing, malformed or
  // readable by others than its owner (a private key must be mode 600).
  static KeyPair read(const std::filesystem::path& path);
  // Creates the file with mode 600; refuses to overwrite one that exists.
  void write(const std::filesystem::path& path) const;

  KeyPair(const KeyPair& other);
  KeyPair& operator=(const KeyPair& other);
  ~KeyPair();

  const PublicKey& public_key() const noexcept { return public_; }
  Signature sign(std::span<const std::uint8_t> message) const;

 private:
  KeyPair() = default;
  PublicKey public_{};
  std::array<std::uint8_t, 64> secret_{};  // libsodium's: seed then public key
};

bool verify(const PublicKey& key, std::span<const std::uint8_t> message, const Signature& signature);

// "ferry-ed25519 BASE64 COMMENT" (no comment: no trailing space).
std::string public_key_line(const PublicKey& key, std::string_view comment);
// The key in "BASE64" or "ferry-ed25519 BASE64 ..."; throws UsageError naming the text.
PublicKey parse_public_key(std::string_view base64);
// "SHA256:BASE64" of the key, as ssh prints fingerprints: for logs and errors.
std::string fingerprint(const PublicKey& key);

std::string to_base64(std::span<const std::uint8_t> bytes);

}  // namespace ferry::transport
