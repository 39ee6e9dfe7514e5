// ferryd's table of host-to-host grants (tools/ferryd/capabilities.*): what
// a peer may read, for how long, and that a grant goes with its buffer and
// its owner.
#include "capabilities.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace ferry::ferryd {
namespace {

using namespace std::chrono_literals;

// Owners are compared by address only, never used: any distinct addresses do.
const int owner_a_tag = 0, owner_b_tag = 0;
const Session* const owner_a = reinterpret_cast<const Session*>(&owner_a_tag);
const Session* const owner_b = reinterpret_cast<const Session*>(&owner_b_tag);

Capability grant(std::uint64_t id, const Session* owner, std::uint64_t buffer = 1,
                 std::chrono::steady_clock::duration life = 60s) {
  Capability c;
  c.id = id;
  c.secret = "secret-" + std::to_string(id);
  c.reader.fill(static_cast<std::uint8_t>(id));
  c.owner = owner;
  c.buffer = buffer;
  c.offset = 100;
  c.length = 50;
  c.deadline = std::chrono::steady_clock::now() + life;
  return c;
}

TEST(Capabilities, ALiveGrantGivesItsSecretAndCoversOnlyItsRegion) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a), why)) << why;
  const auto keys = table.keys(1);
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ(keys->secret, "secret-1");
  EXPECT_EQ(keys->reader, grant(1, owner_a).reader) << "the host it was granted to";
  EXPECT_FALSE(table.keys(2).has_value());
  const auto c = table.find(1);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->covers(1, 100, 50));
  EXPECT_TRUE(c->covers(1, 120, 30));
  EXPECT_FALSE(c->covers(2, 100, 50)) << "another buffer";
  EXPECT_FALSE(c->covers(1, 99, 10)) << "starts before";
  EXPECT_FALSE(c->covers(1, 140, 11)) << "ends after";
  EXPECT_FALSE(c->covers(1, 100, 51));
  EXPECT_FALSE(c->covers(1, 151, 0)) << "beyond, even empty";
  EXPECT_FALSE(c->covers(1, ~std::uint64_t{0}, 2)) << "wrapping around";
}

TEST(Capabilities, TheFirstPeerInSpendsIt) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a), why));
  EXPECT_TRUE(table.claim(1));
  EXPECT_FALSE(table.claim(1)) << "a second peer that raced through the handshake";
  EXPECT_FALSE(table.keys(1).has_value()) << "nobody else signs in with it";
  EXPECT_TRUE(table.find(1).has_value()) << "the peer that claimed it still reads through it";
  EXPECT_FALSE(table.claim(2));
}

// The peer's session is bound to the grant it claimed: a claimed id is not
// granted again, and a later grant of the id (once the first is gone, by
// any owner) is another grant, which the old serial does not find.
TEST(Capabilities, APeerIsBoundToTheGrantItClaimed) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a, 1), why));
  const auto serial = table.claim(1);
  ASSERT_TRUE(serial.has_value());
  EXPECT_TRUE(table.find(1, *serial).has_value());
  EXPECT_FALSE(table.add(grant(1, owner_a, 2), why)) << "a claimed id was granted again";
  EXPECT_NE(why.find("capability 1 was claimed"), std::string::npos) << why;
  EXPECT_EQ(table.find(1, *serial)->buffer, 1u);

  table.drop_buffer(owner_a, 1);
  ASSERT_TRUE(table.add(grant(1, owner_b, 1), why)) << why;
  EXPECT_FALSE(table.find(1, *serial).has_value()) << "the old peer would read another owner's buffer";
  EXPECT_TRUE(table.find(1).has_value());
  const auto second = table.claim(1);
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(*second, *serial);
}

// A claim on a live connection takes the grant whose secret it checked:
// one replaced by its owner in between (a retry, a new serial) is not it.
TEST(Capabilities, AClaimWithASerialTakesOnlyThatGrant) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a), why));
  const auto checked = table.find(1);
  ASSERT_TRUE(checked.has_value());
  ASSERT_TRUE(table.add(grant(1, owner_a), why)) << why;  // replaced: another serial
  EXPECT_FALSE(table.claim(1, checked->serial)) << "the grant whose secret was checked is gone";
  const auto now = table.find(1);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(table.claim(1, now->serial), now->serial);
  EXPECT_FALSE(table.claim(1, now->serial)) << "spent";
}

TEST(Capabilities, AnUnclaimedGrantMayBeGrantedAgainByItsOwner) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a), why));
  ASSERT_TRUE(table.add(grant(1, owner_a), why)) << "a retry: " << why;
  ASSERT_TRUE(table.keys(1).has_value());
  EXPECT_EQ(table.keys(1)->secret, "secret-1");
}

TEST(Capabilities, AnExpiredGrantIsGone) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a, 1, -1ms), why));
  EXPECT_FALSE(table.keys(1).has_value());
  EXPECT_FALSE(table.find(1).has_value());
  EXPECT_EQ(table.size(), 0u);
}

TEST(Capabilities, GrantsGoWithTheirBufferAndTheirOwner) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a, 1), why));
  ASSERT_TRUE(table.add(grant(2, owner_a, 2), why));
  ASSERT_TRUE(table.add(grant(3, owner_b, 1), why));
  table.drop_buffer(owner_a, 1);
  EXPECT_FALSE(table.find(1).has_value());
  EXPECT_TRUE(table.find(2).has_value());
  EXPECT_TRUE(table.find(3).has_value()) << "another owner's buffer 1 is another buffer";
  table.drop_owner(owner_a);
  EXPECT_FALSE(table.find(2).has_value());
  EXPECT_TRUE(table.find(3).has_value());
}

TEST(Capabilities, AnotherOwnersIdIsNotTakenOverAndGrantsAreBounded) {
  Capabilities table;
  std::string why;
  ASSERT_TRUE(table.add(grant(1, owner_a), why));
  EXPECT_FALSE(table.add(grant(1, owner_b), why));
  EXPECT_NE(why.find("in use"), std::string::npos) << why;
  EXPECT_EQ(table.find(1)->owner, owner_a);
  EXPECT_TRUE(table.add(grant(1, owner_a, 7), why)) << "its owner may grant it again";
  EXPECT_EQ(table.find(1)->buffer, 7u);
  for (std::uint64_t id = 2; id <= Capabilities::max_per_owner; ++id) ASSERT_TRUE(table.add(grant(id, owner_a), why));
  EXPECT_FALSE(table.add(grant(100000, owner_a), why));
  EXPECT_NE(why.find("at most"), std::string::npos) << why;
  EXPECT_TRUE(table.add(grant(100001, owner_b), why)) << "the bound is per owner";
}

}  // namespace
}  // namespace ferry::ferryd
