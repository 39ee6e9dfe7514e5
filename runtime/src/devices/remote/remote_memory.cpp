#include "devices/remote/remote_memory.hpp"

#include <vector>

#include "data/coherence.hpp"

namespace ferry::detail {

namespace {

bool contiguous(const HostRegion& r) { return r.rows <= 1 || r.ld == r.cols; }

}  // namespace

std::uint64_t RemoteMemory::put(const HostRegion& source) {
  const std::uint64_t id = new_id();
  if (contiguous(source)) {
    bulk_.put(id, source, static_cast<const std::byte*>(source.data), source.bytes());
  } else {
    std::vector<std::byte> packed(source.bytes());
    pack_rows(source, packed.data());
    bulk_.put(id, source, packed.data(), packed.size());
  }
  return id;
}

std::uint64_t RemoteMemory::make(const HostRegion& shape) {
  const std::uint64_t id = new_id();
  bulk_.put(id, shape, nullptr, 0);
  return id;
}

void RemoteMemory::get(std::uint64_t id, const HostRegion& dest) {
  if (contiguous(dest)) {
    bulk_.get(id, static_cast<std::byte*>(dest.data), dest.bytes());
  } else {
    std::vector<std::byte> packed(dest.bytes());
    bulk_.get(id, packed.data(), packed.size());
    unpack_rows(packed.data(), dest);
  }
}

void RemoteMemory::free(std::uint64_t id) noexcept {
  requests_.send(protocol::encode(protocol::Free{id}));
}

}  // namespace ferry::detail
