// Which secret files are private enough: the token file and the key files
// share one rule (transport/src/secret_file.hpp).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secret_file.hpp"

namespace ferry::transport {
namespace {

struct stat file(uid_t owner, gid_t group, mode_t mode) {
  struct stat st {};
  st.st_uid = owner;
  st.st_gid = group;
  st.st_mode = S_IFREG | mode;
  return st;
}

// A user id and a group id this process is not.
constexpr uid_t someone_else = 54321;
constexpr gid_t foreign_group = 54321;

TEST(SecretAccess, OwnFilesMustBePrivate) {
  const uid_t me = geteuid();
  const gid_t mine = getegid();
  EXPECT_EQ(secret_access(file(me, mine, 0600)), SecretAccess::private_to_owner);
  EXPECT_EQ(secret_access(file(me, mine, 0400)), SecretAccess::private_to_owner);
  // Sharing one's own secret with the group is a choice ssh refuses too.
  EXPECT_EQ(secret_access(file(me, mine, 0640)), SecretAccess::readable_by_others);
  EXPECT_EQ(secret_access(file(me, mine, 0604)), SecretAccess::readable_by_others);
  EXPECT_EQ(secret_access(file(me, mine, 0620)), SecretAccess::writable_by_others);
  EXPECT_EQ(secret_access(file(me, mine, 0602)), SecretAccess::writable_by_others);
}

// Kubernetes mounts a Secret for a pod with an fsGroup as root:fsGroup 0440.
TEST(SecretAccess, AnotherUsersFileForThisProcesssGroupIsTheOrchestratorsMount) {
  ASSERT_NE(geteuid(), someone_else);
  EXPECT_EQ(secret_access(file(someone_else, getegid(), 0440)), SecretAccess::shared_with_group);
  // The same mode for a group this process is not in: strangers can read it.
  EXPECT_EQ(secret_access(file(someone_else, foreign_group, 0440)), SecretAccess::readable_by_others);
  // Group write or any access for others is never the orchestrator's mount.
  EXPECT_EQ(secret_access(file(someone_else, getegid(), 0460)), SecretAccess::writable_by_others);
  EXPECT_EQ(secret_access(file(someone_else, getegid(), 0444)), SecretAccess::readable_by_others);
}

}  // namespace
}  // namespace ferry::transport
