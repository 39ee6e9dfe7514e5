// ferryd's --authorized-keys: the clients that may sign in with a key, each
// under a name and with what it may do. One key per line:
//
//   ferry-ed25519 BASE64 NAME [quota=BYTES] [weight=N] [gpus=yes|no] [source-kernels=yes|no]
//     [plugins=yes|no]
//
// '#' starts a comment line. Unset options take ferryd's defaults (its
// --client-quota; everything else allowed, as for the shared token). NAME
// is required: one with '=' (an option where the name belongs) or
// beginning with "token:" is refused, as is a path that is not a regular
// file.
// Reloaded on SIGHUP: a key no longer listed loses its sessions; the
// sessions of a key still listed take its new options at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ferry/transport/identity.hpp"

namespace ferry::ferryd {

// What one client may do; the shared token gets the defaults.
struct Grant {
  std::string name = "token";
  std::optional<std::uint64_t> quota;  // none: --client-quota
  // Its share of the lanes when clients compete for them (fair_share.hpp):
  // a client of weight 2 gets twice the lane time of one of weight 1.
  std::uint32_t weight = 1;
  bool gpus = true;                    // may run on this host's GPUs (no: on its CPU workers only)
  bool source_kernels = true;          // may define kernels from CUDA source
  bool plugins = true;                 // may run kernels of --plugin libraries

  bool operator==(const Grant&) const = default;
};

class AuthorizedKeys {
 public:
  // Throws UsageError naming the file and line of anything malformed, so a
  // bad file is refused whole rather than half applied.
  static AuthorizedKeys load(const std::filesystem::path& path);

  const Grant* find(const transport::PublicKey& key) const;
  std::size_t size() const noexcept { return grants_.size(); }

 private:
  std::map<transport::PublicKey, Grant> grants_;
};

// The keys in force, swapped whole on reload; read from the bootstrap
// thread and the progress thread alike.
class KeyRing {
 public:
  explicit KeyRing(std::filesystem::path path);
  // Rereads the file; on error keeps the keys it had and rethrows.
  void reload();
  std::optional<Grant> find(const transport::PublicKey& key) const;
  std::size_t size() const;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  mutable std::mutex mutex_;
  std::shared_ptr<const AuthorizedKeys> keys_;
};

}  // namespace ferry::ferryd
