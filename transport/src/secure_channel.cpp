#include "ferry/transport/secure_channel.hpp"

#include <openssl/evp.h>
#include <sodium.h>
#ifdef FERRY_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

#include <algorithm>
#include <climits>
#include <cstring>

#include "ferry/error.hpp"
#include "sodium_init.hpp"

namespace ferry::transport {
namespace {

static_assert(crypto_aead_aes256gcm_ABYTES == seal_overhead);  // the tag, in libsodium's layout too
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == seal_overhead);
static_assert(crypto_aead_aes256gcm_KEYBYTES == sizeof(SessionKey));
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == sizeof(SessionKey));

// Header and payload of message n get different nonces: n, then a byte
// saying which part, the rest zero. Both ciphers' nonces have room for it.
enum class Part : std::uint8_t { header = 0, payload = 1 };
using Nonce = std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>;
static_assert(crypto_aead_aes256gcm_NPUBBYTES >= 9);

Nonce nonce_for(std::uint64_t number, Part part) {
  Nonce nonce{};
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(number >> (8 * i));
  nonce[8] = static_cast<unsigned char>(part);
  return nonce;
}

using Ad = std::array<unsigned char, 8>;
Ad length_ad(std::uint64_t bytes) {
  Ad ad{};
  for (int i = 0; i < 8; ++i) ad[i] = static_cast<unsigned char>(bytes >> (8 * i));
  return ad;
}

const unsigned char* u8(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* u8(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

// AES-256-GCM through OpenSSL's EVP: its stitched AES-NI/VAES + carry-less
// multiply code seals at 2-3x libsodium's rate on the same core, and bulk
// payloads are what an encrypted link spends its CPU on. The wire format is
// libsodium's (ciphertext, then the 16-byte tag; the nonce's first 12
// bytes), so both ends need not agree on the library. One context per
// thread, re-keyed per message: the key schedule costs nanoseconds next to
// a payload, and it keeps open_payload thread-safe.
EVP_CIPHER_CTX* gcm_context() {
  struct Holder {
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    ~Holder() { EVP_CIPHER_CTX_free(ctx); }
  };
  thread_local Holder holder;
  if (holder.ctx == nullptr) throw Error("OpenSSL could not allocate a cipher context");
  return holder.ctx;
}

constexpr std::size_t gcm_iv_bytes = 12;
static_assert(crypto_aead_aes256gcm_NPUBBYTES == gcm_iv_bytes);
constexpr std::size_t evp_step = std::size_t{1} << 30;  // EVP lengths are int

bool gcm_update(EVP_CIPHER_CTX* ctx, bool sealing, const unsigned char* in, std::size_t bytes, unsigned char* out) {
  for (std::size_t done = 0; done < bytes;) {
    const int step = static_cast<int>(std::min(bytes - done, evp_step));
    int written = 0;
    const int ok = sealing ? EVP_EncryptUpdate(ctx, out + done, &written, in + done, step)
                           : EVP_DecryptUpdate(ctx, out + done, &written, in + done, step);
    if (ok != 1) return false;
    done += static_cast<std::size_t>(step);
  }
  return true;
}

void gcm_seal(const SessionKey& key, const Nonce& nonce, const unsigned char* plain, std::size_t bytes,
              const unsigned char* ad, std::size_t ad_bytes, unsigned char* out) {
  EVP_CIPHER_CTX* ctx = gcm_context();
  int written = 0;
  bool ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nonce.data()) == 1 &&
            (ad_bytes == 0 || EVP_EncryptUpdate(ctx, nullptr, &written, ad, static_cast<int>(ad_bytes)) == 1) &&
            gcm_update(ctx, true, plain, bytes, out) && EVP_EncryptFinal_ex(ctx, out + bytes, &written) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, seal_overhead, out + bytes) == 1;
  if (!ok) throw Error("OpenSSL refused to seal a message with AES-256-GCM");
}

bool gcm_open(const SessionKey& key, const Nonce& nonce, const unsigned char* sealed, std::size_t bytes,
              const unsigned char* ad, std::size_t ad_bytes, unsigned char* out) {
  const std::size_t plain = bytes - seal_overhead;
  std::array<unsigned char, seal_overhead> tag;
  std::memcpy(tag.data(), sealed + plain, tag.size());  // before an in-place open can reach it
  EVP_CIPHER_CTX* ctx = gcm_context();
  int written = 0;
  return EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nonce.data()) == 1 &&
         (ad_bytes == 0 || EVP_DecryptUpdate(ctx, nullptr, &written, ad, static_cast<int>(ad_bytes)) == 1) &&
         gcm_update(ctx, false, sealed, plain, out) &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, seal_overhead, tag.data()) == 1 &&
         EVP_DecryptFinal_ex(ctx, out + plain, &written) == 1;
}

#ifdef FERRY_HAVE_IPSEC_MB
// AES-256-GCM through Intel's multi-buffer crypto library (libipsec-mb,
// Debian amd64), where the CPU has AES-NI: its AVX-512/VAES code seals and
// opens 2-3x faster than OpenSSL 3.0's (Debian 12's OpenSSL has no VAES GCM;
// 3.2 added one), and on an encrypted link the seal is the CPU the bulk
// data costs. Same standard format.
//
// One manager for the process, made once and never freed (a thread may
// still seal while statics are destroyed). The GCM calls are only its
// function pointers, chosen for this CPU when it is made, and they are not
// given the manager: nothing of a call is kept in it, and the errors they
// report go to the library's one process-wide error number, which
// imb_get_errno falls back to whichever manager it is asked about. A
// manager per thread, as before, cost 196 KiB on every thread that ever
// sealed or opened: one by one, as a ferryd's fetch runners and crypto
// threads first met an encrypted link, steps of a ferryd's growth over the
// soak's hour.
struct ImbManager {
  IMB_MGR* mgr = alloc_mb_mgr(0);
  IMB_ARCH arch = IMB_ARCH_NONE;
  ImbManager() {
    if (mgr != nullptr) init_mb_mgr_auto(mgr, &arch);
  }
  ImbManager(const ImbManager&) = delete;
  ImbManager& operator=(const ImbManager&) = delete;
};

const ImbManager& imb_shared() {
  static const ImbManager* const manager = new ImbManager;
  return *manager;
}

IMB_MGR* imb_manager() { return imb_shared().mgr; }

bool imb_usable() {
  static const bool usable = [] {
    const ImbManager& shared = imb_shared();
    return shared.mgr != nullptr && shared.arch > IMB_ARCH_NOAESNI && imb_get_errno(shared.mgr) == 0;
  }();
  return usable;
}

// The key schedule and hash-key powers, per message (about 130 ns), wiped after.
struct ImbKey {
  gcm_key_data data;
  ImbKey(IMB_MGR* mgr, const SessionKey& key) { IMB_AES256_GCM_PRE(mgr, key.data(), &data); }
  ~ImbKey() { sodium_memzero(&data, sizeof data); }
};

// A non-null pointer for empty input, which the library refuses as null.
const unsigned char* nonnull(const unsigned char* p) {
  static const unsigned char empty = 0;
  return p != nullptr ? p : &empty;
}

void imb_seal(const SessionKey& key, const Nonce& nonce, const unsigned char* plain, std::size_t bytes,
              const unsigned char* ad, std::size_t ad_bytes, unsigned char* out) {
  IMB_MGR* mgr = imb_manager();
  if (mgr == nullptr) throw Error("libipsec-mb could not allocate a manager");
  ImbKey expanded(mgr, key);
  gcm_context_data context;
  IMB_AES256_GCM_ENC(mgr, &expanded.data, &context, out, nonnull(plain), bytes, nonce.data(), nonnull(ad), ad_bytes,
                     out + bytes, seal_overhead);
  if (imb_get_errno(mgr) != 0) throw Error(std::string("libipsec-mb refused to seal a message: ") +
                                           imb_get_strerror(imb_get_errno(mgr)));
}

bool imb_open(const SessionKey& key, const Nonce& nonce, const unsigned char* sealed, std::size_t bytes,
              const unsigned char* ad, std::size_t ad_bytes, unsigned char* out) {
  IMB_MGR* mgr = imb_manager();
  if (mgr == nullptr) return false;
  const std::size_t plain = bytes - seal_overhead;
  std::array<unsigned char, seal_overhead> tag, computed;
  std::memcpy(tag.data(), sealed + plain, tag.size());  // before an in-place open can reach it
  ImbKey expanded(mgr, key);
  gcm_context_data context;
  unsigned char scratch = 0;  // where an empty plaintext "goes"
  IMB_AES256_GCM_DEC(mgr, &expanded.data, &context, plain == 0 ? &scratch : out, nonnull(sealed), plain,
                     nonce.data(), nonnull(ad), ad_bytes, computed.data(), computed.size());
  return imb_get_errno(mgr) == 0 && sodium_memcmp(computed.data(), tag.data(), tag.size()) == 0;
}
#endif

void encrypt(Cipher cipher, const SessionKey& key, const Nonce& nonce, const std::byte* plain, std::size_t bytes,
             const unsigned char* ad, std::size_t ad_bytes, std::byte* out) {
#ifdef FERRY_HAVE_IPSEC_MB
  if (cipher == Cipher::aes256gcm && imb_usable()) return imb_seal(key, nonce, u8(plain), bytes, ad, ad_bytes, u8(out));
#endif
  if (cipher == Cipher::aes256gcm) return gcm_seal(key, nonce, u8(plain), bytes, ad, ad_bytes, u8(out));
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(u8(out), &written, u8(plain), bytes, ad, ad_bytes, nullptr,
                                             nonce.data(), key.data());
}

// In place is allowed by both (libsodium documents m == c; OpenSSL's GCM
// is a counter mode and takes in == out).
bool decrypt(Cipher cipher, const SessionKey& key, const Nonce& nonce, const std::byte* sealed, std::size_t bytes,
             const unsigned char* ad, std::size_t ad_bytes, std::byte* out) {
  if (bytes < seal_overhead) return false;
#ifdef FERRY_HAVE_IPSEC_MB
  if (cipher == Cipher::aes256gcm && imb_usable())
    return imb_open(key, nonce, u8(sealed), bytes, ad, ad_bytes, u8(out));
#endif
  if (cipher == Cipher::aes256gcm) return gcm_open(key, nonce, u8(sealed), bytes, ad, ad_bytes, u8(out));
  unsigned long long written = 0;
  return crypto_aead_xchacha20poly1305_ietf_decrypt(u8(out), &written, nullptr, u8(sealed), bytes, ad, ad_bytes,
                                                    nonce.data(), key.data()) == 0;
}

}  // namespace

const char* to_string(Cipher cipher) noexcept {
  return cipher == Cipher::aes256gcm ? "AES-256-GCM" : "XChaCha20-Poly1305";
}

const char* cipher_engine(Cipher cipher) {
  if (cipher != Cipher::aes256gcm) return "libsodium";
#ifdef FERRY_HAVE_IPSEC_MB
  if (imb_usable()) return "libipsec-mb";
#endif
  return "OpenSSL";
}

Cipher preferred_cipher() {
  ensure_sodium();
  return crypto_aead_aes256gcm_is_available() != 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
}

SecureChannel::SecureChannel(Cipher cipher, const SessionKey& send_key, const SessionKey& receive_key)
    : cipher_(cipher), send_key_(send_key), receive_key_(receive_key) {
  ensure_sodium();  // OpenSSL seals AES-256-GCM on any CPU, so a peer's choice of it is never refused here
}

SecureChannel::~SecureChannel() {
  sodium_memzero(send_key_.data(), send_key_.size());
  sodium_memzero(receive_key_.data(), receive_key_.size());
}

std::vector<std::byte> SecureChannel::seal(std::span<const std::byte> header, std::span<const std::byte> payload,
                                           std::byte* payload_out) {
  const std::uint64_t number = sequence(next_send_, !payload.empty())++;
  const std::uint64_t sealed_payload = payload.empty() ? 0 : payload.size() + seal_overhead;
  if (!payload.empty())
    encrypt(cipher_, send_key_, nonce_for(number, Part::payload), payload.data(), payload.size(), nullptr, 0,
            payload_out);
  std::vector<std::byte> sealed(header.size() + seal_overhead);
  const Ad ad = length_ad(sealed_payload);
  encrypt(cipher_, send_key_, nonce_for(number, Part::header), header.data(), header.size(), ad.data(), ad.size(),
          sealed.data());
  return sealed;
}

bool SecureChannel::open_header(std::span<const std::byte> sealed, std::size_t sealed_payload_bytes,
                                std::vector<std::byte>& header, std::uint64_t& number) {
  if (broken_ || sealed.size() < seal_overhead || (sealed_payload_bytes != 0 && sealed_payload_bytes < seal_overhead)) {
    broken_ = true;
    return false;
  }
  header.resize(sealed.size() - seal_overhead);
  const Ad ad = length_ad(sealed_payload_bytes);
  std::uint64_t& next_receive = sequence(next_receive_, sealed_payload_bytes != 0);
  if (!decrypt(cipher_, receive_key_, nonce_for(next_receive, Part::header), sealed.data(), sealed.size(), ad.data(),
               ad.size(), header.data())) {
    header.clear();
    broken_ = true;
    return false;
  }
  number = next_receive++;
  return true;
}

bool SecureChannel::open_payload(std::uint64_t number, std::span<std::byte> sealed) const {
  return decrypt(cipher_, receive_key_, nonce_for(number, Part::payload), sealed.data(), sealed.size(), nullptr, 0,
                 sealed.data());
}

}  // namespace ferry::transport
