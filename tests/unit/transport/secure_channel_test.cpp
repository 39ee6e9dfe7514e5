// The secure channel alone: its order, its numbering, its standard AES-256-GCM.
#include <gtest/gtest.h>

#include <malloc.h>
#include <sodium.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "ferry/transport/secure_channel.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(SecureChannel, OpensWhatItsPeerSealedInOrderOnly) {
  for (const Cipher cipher : {Cipher::xchacha20poly1305, preferred_cipher()}) {
    SessionKey one{}, two{};
    one.fill(1);
    two.fill(2);
    SecureChannel alice(cipher, one, two), bob(cipher, two, one);
    const Bytes header = text_bytes("header"), payload = random_bytes(1000, 3);
    Bytes sealed_payload(payload.size() + seal_overhead);
    const auto first = alice.seal(header, payload, sealed_payload.data());
    const auto second = alice.seal(header, {}, nullptr);
    std::vector<std::byte> opened;
    std::uint64_t number = 0;
    ASSERT_TRUE(bob.open_header(first, sealed_payload.size(), opened, number)) << to_string(cipher);
    EXPECT_EQ(opened, header);
    ASSERT_TRUE(bob.open_payload(number, sealed_payload));
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), sealed_payload.begin()));
    ASSERT_TRUE(bob.open_header(second, 0, opened, number));
    // Its own seal, replayed, or the other direction's: nothing opens.
    EXPECT_FALSE(bob.open_header(second, 0, opened, number));
    EXPECT_FALSE(alice.open_header(alice.seal(header, {}, nullptr), 0, opened, number));
  }
}

// Sealing and opening keep nothing per thread: the threads that ever seal
// (a ferryd's eight fetch runners, each worker's crypto threads) are many
// and long-lived, and a library manager of 196 KiB each, made at a thread's
// first seal, added step by step to a ferryd's growth over the soak's hour. Sixteen threads, each
// sealing and opening once, all alive when the heap is measured.
TEST(SecureChannel, SealingOnManyThreadsKeepsNothingPerThread) {
  SessionKey one{}, two{};
  one.fill(5);
  two.fill(6);
  const auto seal_and_open = [&] {
    SecureChannel alice(preferred_cipher(), one, two), bob(preferred_cipher(), two, one);
    std::vector<std::byte> opened;
    std::uint64_t number = 0;
    return bob.open_header(alice.seal(text_bytes("header"), {}, nullptr), 0, opened, number);
  };
  ASSERT_TRUE(seal_and_open());  // what is made once per process, made here
  const auto heap_in_use = [] {
    const struct mallinfo2 info = ::mallinfo2();
    return info.uordblks + info.hblkhd;  // in the arenas, and mapped on its own
  };
  constexpr int threads = 16;
  std::mutex mutex;
  std::condition_variable changed;
  int sealed = 0, failed = 0;
  bool release = false;
  std::vector<std::thread> running;
  const std::size_t before = heap_in_use();
  for (int i = 0; i < threads; ++i)
    running.emplace_back([&] {
      const bool ok = seal_and_open();
      std::unique_lock lock(mutex);
      ++sealed;
      failed += ok ? 0 : 1;
      changed.notify_all();
      changed.wait(lock, [&] { return release; });
    });
  std::size_t during = 0;
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return sealed == threads; });
    during = heap_in_use();
    release = true;
  }
  changed.notify_all();
  for (auto& t : running) t.join();
  EXPECT_EQ(failed, 0);
  const std::size_t grew = during > before ? during - before : 0;
  EXPECT_LT(grew, std::size_t{threads} * 16 * 1024)
      << grew / 1024 << " KiB more heap in use with " << threads << " threads alive that each sealed once";
}

// Bulk lanes: payloads travel apart from the rest, so either may arrive
// first; each kind still opens only in its own order, and a message passed
// off as the other kind (its payload dropped, say) does not open.
TEST(SecureChannel, PayloadsNumberedApartOpenBesideTheRestInTheirOwnOrder) {
  SessionKey one{}, two{};
  one.fill(3);
  two.fill(4);
  SecureChannel alice(preferred_cipher(), one, two), bob(preferred_cipher(), two, one);
  alice.number_payloads_apart();
  bob.number_payloads_apart();
  const Bytes payload = random_bytes(5000, 9);
  Bytes first_payload(payload.size() + seal_overhead), second_payload(payload.size() + seal_overhead);
  const auto first = alice.seal(text_bytes("p1"), payload, first_payload.data());
  const auto control = alice.seal(text_bytes("c1"), {}, nullptr);
  const auto second = alice.seal(text_bytes("p2"), payload, second_payload.data());
  std::vector<std::byte> opened;
  std::uint64_t number = 0;
  ASSERT_TRUE(bob.open_header(control, 0, opened, number));  // before the payloads sent ahead of it
  EXPECT_EQ(opened, text_bytes("c1"));
  ASSERT_TRUE(bob.open_header(first, first_payload.size(), opened, number));
  ASSERT_TRUE(bob.open_payload(number, first_payload));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), first_payload.begin()));
  ASSERT_TRUE(bob.open_header(second, second_payload.size(), opened, number));
  EXPECT_EQ(opened, text_bytes("p2"));

  SecureChannel carol(preferred_cipher(), two, one);
  carol.number_payloads_apart();
  EXPECT_FALSE(carol.open_header(second, second_payload.size(), opened, number));  // p2 before p1
  SecureChannel dave(preferred_cipher(), two, one);
  dave.number_payloads_apart();
  EXPECT_FALSE(dave.open_header(first, 0, opened, number));  // a payload's header as a header-only message
}

// The seal is standard AES-256-GCM: libsodium's independent implementation
// opens what the channel sealed with OpenSSL (message 0's payload: nonce =
// the number's 8 little-endian bytes, then 1 for "payload", no associated
// data), and a flipped bit anywhere fails it.
// The other way: what libsodium seals (the standard format) the channel
// opens, and refuses once altered, whichever library the channel uses
// (cipher_engine says; libipsec-mb where built with it).
TEST(SecureChannel, AesGcmOpensWhatLibsodiumSeals) {
  ASSERT_GE(sodium_init(), 0);
  if (crypto_aead_aes256gcm_is_available() == 0) GTEST_SKIP() << "libsodium's AES-256-GCM needs AES-NI and PCLMUL";
  SessionKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i * 5 + 3);
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{4097}, (std::size_t{1} << 20) + 7}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes, opened by " + cipher_engine(Cipher::aes256gcm));
    SecureChannel channel(Cipher::aes256gcm, key, key);
    const Bytes payload = random_bytes(bytes, 12);
    std::array<unsigned char, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
    nonce[8] = 1;  // message 0's payload
    Bytes sealed(bytes + seal_overhead);
    unsigned long long written = 0;
    crypto_aead_aes256gcm_encrypt(reinterpret_cast<unsigned char*>(sealed.data()), &written,
                                  reinterpret_cast<const unsigned char*>(payload.data()), bytes, nullptr, 0, nullptr,
                                  nonce.data(), key.data());
    Bytes altered = sealed;
    altered[bytes / 3] ^= std::byte{4};
    EXPECT_FALSE(channel.open_payload(0, altered));
    ASSERT_TRUE(channel.open_payload(0, sealed));
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), sealed.begin()));
  }
}

TEST(SecureChannel, AesGcmSealIsWhatLibsodiumOpens) {
  ASSERT_GE(sodium_init(), 0);
  if (crypto_aead_aes256gcm_is_available() == 0) GTEST_SKIP() << "libsodium's AES-256-GCM needs AES-NI and PCLMUL";
  SessionKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i * 7 + 1);
  SecureChannel channel(Cipher::aes256gcm, key, key);
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
    const Bytes payload = random_bytes(bytes, 11);
    Bytes sealed(bytes + seal_overhead);
    const auto number = channel.next_number(true);
    channel.seal(text_bytes("h"), payload, sealed.data());
    std::array<unsigned char, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
    for (int i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(number >> (8 * i));
    nonce[8] = 1;
    Bytes opened(bytes);
    unsigned long long written = 0;
    const auto* in = reinterpret_cast<const unsigned char*>(sealed.data());
    auto* out = reinterpret_cast<unsigned char*>(opened.data());
    ASSERT_EQ(crypto_aead_aes256gcm_decrypt(out, &written, nullptr, in, sealed.size(), nullptr, 0, nonce.data(),
                                            key.data()),
              0)
        << bytes << " bytes";
    EXPECT_EQ(opened, payload);
    sealed[bytes / 2] ^= std::byte{1};
    EXPECT_NE(crypto_aead_aes256gcm_decrypt(out, &written, nullptr, in, sealed.size(), nullptr, 0, nonce.data(),
                                            key.data()),
              0);
  }
}

}  // namespace
}  // namespace ferry::transport
