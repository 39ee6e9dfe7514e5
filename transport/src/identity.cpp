#include "ferry/transport/identity.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "ferry/error.hpp"
#include "secret_file.hpp"
#include "sodium_init.hpp"

namespace ferry::transport {
namespace {

constexpr std::string_view private_key_type = "ferry-ed25519-private";
static_assert(crypto_sign_PUBLICKEYBYTES == sizeof(PublicKey));
static_assert(crypto_sign_BYTES == sizeof(Signature));
static_assert(crypto_sign_SECRETKEYBYTES == 64);

std::vector<std::uint8_t> from_base64(std::string_view text, const std::string& what) {
  ensure_sodium();
  std::vector<std::uint8_t> out(text.size());
  std::size_t length = 0;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &length, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0)
    throw UsageError(fmt::format("{}: '{}' is not base64", what, text.substr(0, 64)));
  out.resize(length);
  return out;
}

}  // namespace

std::string to_base64(std::span<const std::uint8_t> bytes) {
  ensure_sodium();
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes.data(), bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

KeyPair KeyPair::generate() {
  ensure_sodium();
  KeyPair pair;
  crypto_sign_keypair(pair.public_.data(), pair.secret_.data());
  return pair;
}

KeyPair::KeyPair(const KeyPair& other) : public_(other.public_), secret_(other.secret_) {}
KeyPair& KeyPair::operator=(const KeyPair& other) {
  public_ = other.public_;
  secret_ = other.secret_;
  return *this;
}
KeyPair::~KeyPair() { sodium_memzero(secret_.data(), secret_.size()); }

KeyPair KeyPair::read(const std::filesystem::path& path) {
  ensure_sodium();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("private key {}: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("private key {}: not a regular file", path.string()));
  if (const auto access = secret_access(st);
      access != SecretAccess::private_to_owner && access != SecretAccess::shared_with_group)
    throw Error(fmt::format("private key {}: mode {:o} lets others than its owner use it; chmod 600 it",
                            path.string(), st.st_mode & 0777));
  std::ifstream in(path);
  std::string type, text;
  if (!(in >> type >> text) || type != private_key_type)
    throw Error(fmt::format("private key {}: expected one line '{} BASE64'", path.string(), private_key_type));
  std::vector<std::uint8_t> seed;
  try {
    seed = from_base64(text, "private key " + path.string());
  } catch (const UsageError& e) {
    throw Error(e.what());
  }
  if (seed.size() != crypto_sign_SEEDBYTES)
    throw Error(fmt::format("private key {}: {} bytes of key, expected {}", path.string(), seed.size(),
                            crypto_sign_SEEDBYTES));
  KeyPair pair;
  crypto_sign_seed_keypair(pair.public_.data(), pair.secret_.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  sodium_memzero(text.data(), text.size());
  return pair;
}

void KeyPair::write(const std::filesystem::path& path) const {
  // O_EXCL: never replaces a key someone may depend on; 0600 from the start,
  // so the secret is never readable by others, not even for a moment.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create private key {}: {}", path.string(), std::strerror(errno)));
  std::string line = fmt::format("{} {}\n", private_key_type,
                                 to_base64(std::span(secret_.data(), crypto_sign_SEEDBYTES)));
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  sodium_memzero(line.data(), line.size());
  ::close(fd);
  if (!ok) throw Error(fmt::format("cannot write private key {}", path.string()));
}

Signature KeyPair::sign(std::span<const std::uint8_t> message) const {
  Signature signature{};
  crypto_sign_detached(signature.data(), nullptr, message.data(), message.size(), secret_.data());
  return signature;
}

bool verify(const PublicKey& key, std::span<const std::uint8_t> message, const Signature& signature) {
  ensure_sodium();
  return crypto_sign_verify_detached(signature.data(), message.data(), message.size(), key.data()) == 0;
}

std::string public_key_line(const PublicKey& key, std::string_view comment) {
  auto line = fmt::format("{} {}", public_key_type, to_base64(key));
  if (!comment.empty()) line += fmt::format(" {}", comment);
  return line;
}

PublicKey parse_public_key(std::string_view text) {
  std::istringstream words{std::string(text)};
  std::string first, second;
  words >> first;
  std::string base64 = first;
  if (first == public_key_type) {
    words >> second;
    base64 = second;
  }
  const auto bytes = from_base64(base64, "public key");
  if (bytes.size() != sizeof(PublicKey))
    throw UsageError(fmt::format("public key '{}': {} bytes, expected {}", base64.substr(0, 64), bytes.size(),
                                 sizeof(PublicKey)));
  PublicKey key{};
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}

std::string fingerprint(const PublicKey& key) {
  std::array<std::uint8_t, crypto_hash_sha256_BYTES> hash{};
  crypto_hash_sha256(hash.data(), key.data(), key.size());
  auto text = to_base64(hash);
  while (!text.empty() && text.back() == '=') text.pop_back();
  return "SHA256:" + text;
}

}  // namespace ferry::transport
