// `ferry keygen`: an Ed25519 key pair for signing in to ferryd (a client's
// identity) or for ferryd itself (--host-key).
#pragma once

#include <filesystem>
#include <string>

namespace ferry::tools {

// Writes the private key to `path` (mode 600; an existing file is never
// replaced) and prints the public line for ferryd's --authorized-keys, named
// `name` (default: user@host). Returns the exit status.
int run_keygen(const std::filesystem::path& path, std::string name);

}  // namespace ferry::tools
