// Sealed connections: what arrives opens, what was tampered with never does.
#include <gtest/gtest.h>

#include <set>

#include "ferry/transport/secure_channel.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

// Two workers joined as the bootstrap joins them. The sending end is
// plaintext, and the test seals by hand with the keys the receiving end
// expects, so it can tamper, replay, reorder and truncate at will.
struct SealedPair {
  SealedPair() {
    one.fill(7);
    two.fill(9);
    sender_worker = Worker::create({"sealer"});
    receiver_worker = Worker::create({"opener"});
    receiver = Connection::to_worker(receiver_worker, sender_worker->address(), "sealer",
                                     std::make_unique<SecureChannel>(preferred_cipher(), two, one), collect(inbox),
                                     [this](Connection&, const std::string& reason) { errors.push(reason); });
    sender = Connection::to_worker(sender_worker, receiver_worker->address(), "opener", nullptr, {}, {});
    hand = std::make_unique<SecureChannel>(preferred_cipher(), one, two);
  }
  ~SealedPair() {
    sender->close();
    receiver->close();
  }
  struct Sealed {
    Bytes header, payload;
  };
  Sealed seal(const std::string& header, const Bytes& payload = {}) {
    Sealed s;
    if (!payload.empty()) s.payload.resize(payload.size() + seal_overhead);
    s.header = hand->seal(text_bytes(header), payload, s.payload.data());
    return s;
  }
  std::string send(const Sealed& s) {
    return send_and_wait(*sender, s.header, s.payload.empty() ? nullptr : s.payload.data(), s.payload.size());
  }

  SessionKey one{}, two{};
  std::shared_ptr<Worker> sender_worker, receiver_worker;
  Inbox<Message> inbox;
  Inbox<std::string> errors;
  std::shared_ptr<Connection> receiver, sender;
  std::unique_ptr<SecureChannel> hand;
};

TEST(SealedConnection, OpensHeadersAndPayloadsOfEverySize) {
  SealedPair pair;
  EXPECT_TRUE(pair.receiver->encrypted());
  EXPECT_FALSE(pair.sender->encrypted());
  const Bytes big = random_bytes(3 << 20, 5);  // rendezvous
  EXPECT_EQ(pair.send(pair.seal("small")), "");
  EXPECT_EQ(pair.send(pair.seal("big", big)), "");
  auto got = pair.inbox.wait(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].header, "small");
  EXPECT_EQ(got[1].header, "big");
  EXPECT_EQ(got[1].error, "");
  EXPECT_TRUE(got[1].payload == big);
  EXPECT_EQ(pair.errors.size(), 0u);
}

// Each message of a batch is sealed and numbered on its own: the receiver
// opens them one by one, in order, as if they had come apart.
TEST(SealedConnection, BatchedMessagesAreOpenedOneByOne) {
  SealedPair pair;
  constexpr int count = 200;
  std::vector<SealedPair::Sealed> sealed;
  for (int i = 0; i < count; ++i) sealed.push_back(pair.seal(std::to_string(i)));
  const auto before = pair.sender_worker->batched_messages();
  pair.sender_worker->call([&] {
    for (const auto& s : sealed) pair.sender->send(s.header);
    return 0;
  });
  auto got = pair.inbox.wait(count, 30s);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) ASSERT_EQ(got[i].header, std::to_string(i));
  EXPECT_GT(pair.sender_worker->batched_messages() - before, static_cast<std::uint64_t>(count / 2));
  EXPECT_EQ(pair.errors.size(), 0u);
}

TEST(SealedConnection, LargePayloadsOpenedOffTheProgressThreadStayIntact) {
  SealedPair pair;
  std::vector<Bytes> sent;
  for (int i = 0; i < 6; ++i) {
    sent.push_back(random_bytes((i % 2 == 0 ? (1 << 20) + 3 * i : 1000), 20 + i));
    EXPECT_EQ(pair.send(pair.seal("m" + std::to_string(i), sent.back())), "");
  }
  auto got = pair.inbox.wait(6);
  ASSERT_EQ(got.size(), 6u);
  // In the order each payload finished: a small one may overtake a large one.
  std::set<std::string> seen;
  for (const auto& message : got) {
    ASSERT_EQ(message.header.substr(0, 1), "m");
    const int i = std::stoi(message.header.substr(1));
    ASSERT_TRUE(i >= 0 && i < 6) << message.header;
    seen.insert(message.header);
    EXPECT_EQ(message.error, "");
    EXPECT_TRUE(message.payload == sent[i]) << "payload " << i;
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(pair.errors.size(), 0u);
}

TEST(SealedConnection, ReplayedMessageDropsTheConnection) {
  SealedPair pair;
  const auto message = pair.seal("once");
  EXPECT_EQ(pair.send(message), "");
  ASSERT_EQ(pair.inbox.wait(1).size(), 1u);
  pair.send(message);
  auto errors = pair.errors.wait(1);
  ASSERT_EQ(errors.size(), 1u) << "a replayed message was not refused";
  EXPECT_NE(errors[0].find("failed authentication"), std::string::npos) << errors[0];
  EXPECT_TRUE(pair.receiver->closed());
  EXPECT_EQ(pair.inbox.size(), 1u) << "the replay was delivered";
}

TEST(SealedConnection, ReorderedMessagesDropTheConnection) {
  SealedPair pair;
  const auto first = pair.seal("first");
  const auto second = pair.seal("second");
  pair.send(second);
  ASSERT_EQ(pair.errors.wait(1).size(), 1u);
  EXPECT_EQ(pair.inbox.size(), 0u);
}

TEST(SealedConnection, TamperedHeaderIsNotDelivered) {
  SealedPair pair;
  auto message = pair.seal("do as I say");
  message.header[2] ^= std::byte{1};
  pair.send(message);
  ASSERT_EQ(pair.errors.wait(1).size(), 1u);
  EXPECT_EQ(pair.inbox.size(), 0u);
}

TEST(SealedConnection, TamperedOrTruncatedPayloadWritesNothing) {
  // 100000 bytes are opened on the progress thread, 1 MiB on a crypto thread.
  for (const std::size_t bytes : {std::size_t{100000}, std::size_t{1} << 20})
  for (const bool truncate : {false, true}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    SealedPair pair;
    auto message = pair.seal("data", random_bytes(bytes, 8));
    if (truncate) {
      message.payload.pop_back();
    } else {
      message.payload[5000] ^= std::byte{0x40};
    }
    pair.send(message);
    ASSERT_EQ(pair.errors.wait(1).size(), 1u) << (truncate ? "truncated" : "tampered");
    // A truncated payload fails with its header; a tampered one reaches the
    // handler, whose destination stays as it was: all zero.
    for (const auto& got : pair.inbox.wait(1, 500ms)) {
      EXPECT_FALSE(truncate) << "a truncated message was delivered";
      EXPECT_NE(got.error, "");
      EXPECT_TRUE(std::all_of(got.payload.begin(), got.payload.end(), [](std::byte b) { return b == std::byte{0}; }));
    }
    EXPECT_TRUE(pair.receiver->closed());
  }
}

}  // namespace
}  // namespace ferry::transport
