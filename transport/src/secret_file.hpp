// Who besides its owner may read or write a file holding a secret (a token,
// a private key): the one rule the token file and the key files share.
#pragma once

#include <sys/stat.h>

namespace ferry::transport {

enum class SecretAccess {
  private_to_owner,    // no one else: mode 600 or 400
  shared_with_group,   // installed by another user (root) for a group this process is in
  readable_by_others,  // someone else can read the secret
  writable_by_others,  // someone else can choose the secret
};

// As OpenSSH judges a key (sshkey_perm_ok), a file the process's own user
// owns must be private to it. A file another user installed, readable by a
// group this process is in and by no one else, is how Kubernetes mounts a
// Secret for a pod with an fsGroup (root:fsGroup, mode 440): that group is
// the pod's, so it is as private as the mount allows and not warned about.
SecretAccess secret_access(const struct stat& st);

}  // namespace ferry::transport
