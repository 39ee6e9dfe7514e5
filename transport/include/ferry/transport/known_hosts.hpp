// The client's pins of ferryd host keys, as ssh's known_hosts: one line per
// server, "HOST:PORT ferry-ed25519 BASE64". A server whose key differs from
// its pin is refused (a man in the middle, or a server that lost its key:
// the operator removes the line after checking); one without a pin is
// trusted on first use and pinned, unless the caller asks for strict
// checking (then every server must be pinned beforehand).
#pragma once

#include <filesystem>
#include <string>

#include "ferry/transport/identity.hpp"

namespace ferry::transport {

enum class Pinning { trust_on_first_use, strict };

// Throws RemoteError naming the address and both fingerprints on a
// mismatch, or the address under strict pinning when it has no line; Error
// naming the file when it cannot be read or written.
void check_host_key(const std::filesystem::path& file, const std::string& address, const PublicKey& key,
                    Pinning pinning);

// Whether any line of the file pins this key, whatever its address: how a
// listening client knows a ferryd that dialled in (--connect) from an
// address nobody can predict.
bool host_key_listed(const std::filesystem::path& file, const PublicKey& key);

}  // namespace ferry::transport
