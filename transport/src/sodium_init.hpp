// libsodium must be initialised once before use; every file of the
// transport that calls it goes through here.
#pragma once

#include <sodium.h>

#include "ferry/error.hpp"

namespace ferry::transport {

inline void ensure_sodium() {
  // sodium_init is thread-safe and idempotent; the static makes later calls free.
  static const int status = sodium_init();
  if (status < 0) throw Error("libsodium could not be initialised (sodium_init failed)");
}

}  // namespace ferry::transport
