// A peer's UCX worker address, judged before UCX sees it. ucp_ep_create takes
// the address without its length and trusts every byte of it: UCX 1.13
// asserts (SIGABRT) on a version it does not know and walks length fields
// past the end of the buffer. check() walks the same structure that UCX
// 1.13's ucp_address_unpack walks, bounds-checked, so that an address it
// passes is read by UCX entirely inside its bytes. It needs no UCX (the
// fuzzer builds it alone): the layout is written down here, in the .cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ferry::transport::worker_address {

// Empty when `address` is a worker address UCX 1.13 may unpack; otherwise
// why not, naming the offending byte.
std::string check(std::span<const std::uint8_t> address);

}  // namespace ferry::transport::worker_address
