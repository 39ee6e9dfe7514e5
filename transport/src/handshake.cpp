#include "handshake.hpp"

#include "ferry/printable.hpp"

#include <sodium.h>

#include "sodium_init.hpp"

namespace ferry::transport::handshake {
namespace {

void add(crypto_hash_sha256_state& state, std::span<const std::byte> bytes) {
  crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}
void add(crypto_hash_sha256_state& state, std::string_view label) {
  crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(label.data()), label.size());
}

}  // namespace

std::vector<std::byte> frame(std::span<const std::byte> body) {
  std::vector<std::byte> out(4 + body.size());
  const auto length = static_cast<std::uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(length >> (8 * i));
  std::copy(body.begin(), body.end(), out.begin() + 4);
  return out;
}

std::uint32_t frame_length(const std::byte* prefix) {
  std::uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= std::to_integer<std::uint32_t>(prefix[i]) << (8 * i);
  return length;
}

Digest challenge_digest(std::span<const std::byte> hello, const protocol::Challenge& challenge) {
  ensure_sodium();
  protocol::Challenge unsigned_challenge = challenge;
  unsigned_challenge.signature = {};
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  add(state, "ferry challenge v2");
  add(state, hello);
  add(state, protocol::encode(unsigned_challenge));
  Digest digest{};
  crypto_hash_sha256_final(&state, digest.data());
  return digest;
}

Digest auth_digest(std::span<const std::byte> hello, std::span<const std::byte> challenge,
                   std::span<const std::uint8_t> worker_address, std::span<const std::uint8_t> network_address) {
  ensure_sodium();
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  add(state, "ferry auth v2");
  add(state, hello);
  add(state, challenge);
  crypto_hash_sha256_update(&state, worker_address.data(), worker_address.size());
  // Bound like the worker address, so that no one on the way can point the
  // control endpoint elsewhere; absent, the digest is an older peer's.
  if (!network_address.empty()) {
    add(state, "network address");
    std::uint8_t length[4];
    for (int i = 0; i < 4; ++i) length[i] = static_cast<std::uint8_t>(network_address.size() >> (8 * i));
    crypto_hash_sha256_update(&state, length, sizeof length);
    crypto_hash_sha256_update(&state, network_address.data(), network_address.size());
  }
  Digest digest{};
  crypto_hash_sha256_final(&state, digest.data());
  return digest;
}

Exchange::Exchange() {
  ensure_sodium();
  crypto_kx_keypair(public_key.data(), secret.data());
}
Exchange::~Exchange() { sodium_memzero(secret.data(), secret.size()); }

std::unique_ptr<SecureChannel> client_channel(const Exchange& mine, const protocol::Key& server, Cipher cipher) {
  SessionKey receive{}, send{};
  if (crypto_kx_client_session_keys(receive.data(), send.data(), mine.public_key.data(), mine.secret.data(),
                                    server.data()) != 0)
    return nullptr;
  auto channel = std::make_unique<SecureChannel>(cipher, send, receive);
  sodium_memzero(receive.data(), receive.size());
  sodium_memzero(send.data(), send.size());
  return channel;
}

std::unique_ptr<SecureChannel> server_channel(const Exchange& mine, const protocol::Key& client, Cipher cipher) {
  SessionKey receive{}, send{};
  if (crypto_kx_server_session_keys(receive.data(), send.data(), mine.public_key.data(), mine.secret.data(),
                                    client.data()) != 0)
    return nullptr;
  auto channel = std::make_unique<SecureChannel>(cipher, send, receive);
  sodium_memzero(receive.data(), receive.size());
  sodium_memzero(send.data(), send.size());
  return channel;
}

std::string printable(std::string_view text, std::size_t limit) { return ferry::printable(text, limit); }

}  // namespace ferry::transport::handshake
