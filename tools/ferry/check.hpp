#pragma once

#include <chrono>
#include <string>

namespace ferry::tools {

struct CheckOptions {
  std::string address;     // [ucx://]host:port
  std::string token;       // inline, or
  std::string token_file;  // the file holding it (else FERRY_TOKEN / FERRY_TOKEN_FILE)
  std::string identity;    // sign in with this key (else FERRY_IDENTITY)
  bool strict = false;     // host keys pinned beforehand only (else FERRY_STRICT_HOST_KEYS)
  std::chrono::milliseconds timeout{10000};
};

// `ferry check`: connects to a ferryd as a runtime would, authenticates,
// measures the link and prints what the host offers: its version, devices
// and kernels, and what seals the link. It trusts a host exactly when a
// program would: the runtime's own FERRY_* link variables (token, identity,
// known hosts, strict host keys, plaintext) apply, the options above on top.
// Exit status 0 when the host is usable, 1 (with the host and the reason on
// stderr) when it is not.
int run_check(const CheckOptions& options);

}  // namespace ferry::tools
