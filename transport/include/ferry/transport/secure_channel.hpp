// The AEAD seal on every message of an encrypted connection. Keys come from
// the bootstrap's authenticated X25519 exchange (libsodium crypto_kx), one
// per direction; each message's nonce is its number in that direction, so
// no nonce repeats under a key, and a receiver that expects message n opens
// nothing else: a replayed, reordered, truncated or altered message fails
// to authenticate and the connection ends.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry::transport {

using SessionKey = std::array<std::uint8_t, 32>;

enum class Cipher : std::uint8_t { aes256gcm, xchacha20poly1305 };
const char* to_string(Cipher cipher) noexcept;
// The library that seals and opens `cipher` in this process: "libipsec-mb"
// (Intel's, when built with it and the CPU has AES-NI), "OpenSSL" or "libsodium".
const char* cipher_engine(Cipher cipher);
// AES-256-GCM (sealed by libipsec-mb or OpenSSL) where the CPU has AES-NI and PCLMUL
// (libsodium's crypto_aead_aes256gcm_is_available), XChaCha20-Poly1305
// (libsodium) elsewhere, where AES in software would be slower than it.
Cipher preferred_cipher();

inline constexpr std::size_t seal_overhead = 16;  // the tag both ciphers append

class SecureChannel {
 public:
  // Wipes the keys it was given a copy of when it goes.
  SecureChannel(Cipher cipher, const SessionKey& send_key, const SessionKey& receive_key);
  ~SecureChannel();
  SecureChannel(const SecureChannel&) = delete;
  SecureChannel& operator=(const SecureChannel&) = delete;

  Cipher cipher() const noexcept { return cipher_; }

  // Seals the next outgoing message: returns the sealed header and, when
  // there is a payload, writes it sealed (payload.size() + seal_overhead
  // bytes) to payload_out. The header's seal covers the sealed payload's
  // length, so a truncated payload fails with its header. Not thread-safe:
  // messages are sealed in the order they go on the wire.
  std::vector<std::byte> seal(std::span<const std::byte> header, std::span<const std::byte> payload,
                              std::byte* payload_out);

  // Opens the next incoming message's header, arriving with `sealed_payload_bytes`
  // of payload. False when it does not authenticate; the channel is then
  // spent and the caller must drop the connection. `number` identifies the
  // message for open_payload.
  bool open_header(std::span<const std::byte> sealed, std::size_t sealed_payload_bytes,
                   std::vector<std::byte>& header, std::uint64_t& number);
  // Opens message `number`'s payload in place (the plaintext is its first
  // size() - seal_overhead bytes). False when it does not authenticate; the
  // bytes are then garbage and must not be used. Thread-safe.
  bool open_payload(std::uint64_t number, std::span<std::byte> sealed) const;

  // From now on, messages with a payload are numbered in a sequence of
  // their own (the connection's bulk lanes carry them on endpoints of their
  // own, so they interleave with the rest in no fixed order). The two
  // sequences' numbers differ in the top bit, so no nonce repeats. Both
  // ends switch before their first message.
  void number_payloads_apart() noexcept { payloads_apart_ = true; }
  // The number the next outgoing message with(out) a payload will carry.
  std::uint64_t next_number(bool payload) const noexcept { return next_send_[payloads_apart_ && payload]; }


 private:
  Cipher cipher_;
  SessionKey send_key_{};
  SessionKey receive_key_{};
  static constexpr std::uint64_t payload_sequence = std::uint64_t{1} << 63;
  std::uint64_t& sequence(std::uint64_t* next, bool payload) noexcept { return next[payloads_apart_ && payload]; }
  std::uint64_t next_send_[2] = {0, payload_sequence};
  std::uint64_t next_receive_[2] = {0, payload_sequence};
  bool payloads_apart_ = false;
  bool broken_ = false;
};

}  // namespace ferry::transport
