// How the connection's files tell a caller that an operation ended: one
// callback with an error string (empty: it went well).
#pragma once

#include <ucp/api/ucp.h>

#include <exception>
#include <functional>
#include <string>

#include "ferry/log.hpp"

namespace ferry::transport {

using Done = std::function<void(const std::string& error)>;

// User callbacks run inside UCX's callbacks, where an exception must not pass.
inline void notify(const Done& done, const std::string& error) {
  if (!done) return;
  try {
    done(error);
  } catch (const std::exception& e) {
    log().error("ucx: a completion callback threw: {}", e.what());
  }
}

inline std::string failure(ucs_status_t status, const char* call) {
  return std::string(call) + ": " + ucs_status_string(status);
}

}  // namespace ferry::transport
