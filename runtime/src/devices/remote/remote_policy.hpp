// What the runtime does when a remote GPU host cannot be used: which
// failures are permanent (retrying cannot fix them: they are errors, or one
// warning under RemotePolicy::prefer) and which are transient (the host is
// retried in the background and its tasks fail over meanwhile).
#pragma once

#include <string>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::detail {

// The host answered and refused us, or cannot be spoken to at all: a wrong
// token, a protocol version it does not speak, a host key that is not the
// pinned one (or, under strict host keys, not pinned). Never retried.
struct RemoteRefused : RemoteError {
  using RemoteError::RemoteError;
};

// Whether a refusal with this status would happen again on the next try.
bool permanent(protocol::Status status) noexcept;

// "ucx://host:port" or "host:port" as the bare "host:port" a RemoteDevice
// takes. Anything else (another scheme such as http://, a path, no port) is
// a UsageError naming the address and what was expected.
std::string remote_address(const std::string& text);

RemotePolicy parse_remote_policy(std::string_view text);
const char* to_string(RemotePolicy policy) noexcept;

}  // namespace ferry::detail
