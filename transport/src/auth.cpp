#include "ferry/transport/auth.hpp"

#include <fmt/format.h>
#include <sodium.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "secret_file.hpp"

namespace ferry::transport {
namespace {

static_assert(crypto_auth_hmacsha256_BYTES == std::tuple_size_v<Mac>);
static_assert(crypto_hash_sha256_BYTES == crypto_auth_hmacsha256_KEYBYTES);

void ensure_sodium() {
  // sodium_init is thread-safe and idempotent; the static makes later calls free.
  static const int status = sodium_init();
  if (status < 0) throw Error("libsodium could not be initialised (sodium_init failed)");
}

// Hashing the token gives a fixed-size key whatever the token's length.
void derive_key(std::string_view token, unsigned char (&key)[crypto_auth_hmacsha256_KEYBYTES]) {
  crypto_hash_sha256(key, reinterpret_cast<const unsigned char*>(token.data()), token.size());
}

}  // namespace

Mac auth_mac(std::string_view token, const Nonce& nonce, std::string_view client_name) {
  ensure_sodium();
  unsigned char key[crypto_auth_hmacsha256_KEYBYTES];
  derive_key(token, key);
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, key, sizeof key);
  crypto_auth_hmacsha256_update(&state, nonce.data(), nonce.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(client_name.data()),
                                client_name.size());
  Mac mac{};
  crypto_auth_hmacsha256_final(&state, mac.data());
  sodium_memzero(key, sizeof key);
  sodium_memzero(&state, sizeof state);
  return mac;
}

std::string read_token_file(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) throw Error(fmt::format("token file {}: does not exist", path.string()));
    throw Error(fmt::format("token file {}: {}", path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("token file {}: not a regular file", path.string()));
  const SecretAccess access = secret_access(st);
  // Whoever may write the file may choose the token and so authenticate:
  // refused, as ssh refuses such a key, rather than a warning nobody reads.
  if (access == SecretAccess::writable_by_others)
    throw Error(fmt::format("token file {}: group or others may write it (mode {:03o}), so they could choose the "
                            "token; chmod 600 it",
                            path.string(), st.st_mode & 0777));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("token file {}: cannot be read", path.string()));
  std::string token{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(fmt::format("token file {}: read failed", path.string()));
  // One line ending, as `echo` (or an editor on Windows) leaves it.
  if (token.ends_with("\r\n")) token.resize(token.size() - 2);
  else if (token.ends_with('\n') || token.ends_with('\r')) token.pop_back();
  if (token.empty()) throw Error(fmt::format("token file {}: is empty", path.string()));
  if (token.size() < min_token_bytes)
    throw Error(fmt::format("token file {}: the token is {} bytes, fewer than the {} a token needs to resist "
                            "guessing; write a random one, e.g. head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
                            path.string(), token.size(), min_token_bytes));

  if (access == SecretAccess::readable_by_others)
    log().warn("token file {} is readable by others than its owner (mode {:03o}); chmod 600 it", path.string(),
               st.st_mode & 0777);
  return token;
}

std::string sha256_hex(std::string_view data) {
  ensure_sodium();
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  char hex[2 * sizeof digest + 1];
  sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
  return hex;
}

Nonce random_nonce() {
  ensure_sodium();
  Nonce nonce{};
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

bool verify_mac(std::string_view token, const Nonce& nonce, std::string_view client_name, const Mac& mac) {
  ensure_sodium();
  unsigned char key[crypto_auth_hmacsha256_KEYBYTES];
  derive_key(token, key);
  // The one-shot verify needs the whole message in one piece.
  std::string message(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  message.append(client_name);
  const bool ok = crypto_auth_hmacsha256_verify(mac.data(), reinterpret_cast<const unsigned char*>(message.data()),
                                                message.size(), key) == 0;
  sodium_memzero(key, sizeof key);
  return ok;
}

}  // namespace ferry::transport
