// Little-endian integers in byte buffers, for the transport's own framing
// (batched frames, pull descriptors) outside the protocol's encoder.
#pragma once

#include <concepts>
#include <cstddef>
#include <vector>

namespace ferry::transport {

template <std::unsigned_integral T>
void put_le(std::vector<std::byte>& out, T n) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::byte>(n >> (8 * i)));
}

// Reads sizeof(T) bytes at `in`; the caller has checked they are there.
template <std::unsigned_integral T>
T get_le(const std::byte* in) {
  T n = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) n |= static_cast<T>(static_cast<T>(in[i]) << (8 * i));
  return n;
}

}  // namespace ferry::transport
