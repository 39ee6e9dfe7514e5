#include "secret_file.hpp"

#include <unistd.h>

#include <vector>

namespace ferry::transport {

namespace {

bool in_group(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int count = ::getgroups(0, nullptr);
  if (count <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(count));
  const int got = ::getgroups(count, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  return false;
}

}  // namespace

SecretAccess secret_access(const struct stat& st) {
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return SecretAccess::writable_by_others;
  if ((st.st_mode & S_IROTH) != 0) return SecretAccess::readable_by_others;
  if ((st.st_mode & S_IRGRP) == 0) return SecretAccess::private_to_owner;
  // Group-readable: a choice the owner made if the owner is this process's
  // user; another user's file shared with this process's own group is the
  // mount an orchestrator gives it.
  if (st.st_uid != ::geteuid() && in_group(st.st_gid)) return SecretAccess::shared_with_group;
  return SecretAccess::readable_by_others;
}

}  // namespace ferry::transport
