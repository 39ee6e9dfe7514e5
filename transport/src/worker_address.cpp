#include "worker_address.hpp"

#include <cstddef>
#include <optional>

// The layout, as UCX 1.13 packs a worker address (ucp_worker_get_address,
// not unified mode: Ferry never turns UCX_UNIFIED_MODE on) and unpacks it
// in ucp_ep_create (src/ucp/wireup/address.c):
//
//   header      v1: 1 byte, version (low 4 bits, 0) and flags (high 4 bits)
//               v2: 2 bytes, version (low 4 bits of the first, 1), flags
//               (the second)
//   uuid        8 bytes, with the WORKER_UUID flag
//   client id   8 bytes, with the CLIENT_ID flag
//   name        length byte + bytes, with the DEBUG_INFO flag
//   then 0xff (no transports at all), or devices until one says LAST:
//     md index  1 byte: EMPTY_DEV (0x80) and the index (v1: low 5 bits;
//               v2: low 7 bits, all set meaning "the next byte is it")
//     dev len   1 byte: LAST (0x80), NUM_PATHS (0x40), SYS_DEVICE (0x20),
//               length in the low 5 bits (v2: all set: the next byte is it)
//     paths     1 byte, with NUM_PATHS
//     sys dev   1 byte, with SYS_DEVICE
//     address   dev len bytes
//     unless EMPTY_DEV, interfaces until one says LAST:
//       checksum  2 bytes (the transport's name)
//       attrs     v1: 16 bytes; v2: 8 bytes
//       if len    1 byte: LAST (0x80), HAS_EP_ADDR (0x40), length in the
//                 low 6 bits (v2: all set: the next byte is it)
//       address   if len bytes
//       endpoint addresses, with HAS_EP_ADDR: only in a wireup message's
//                 address, never in a worker's, so refused here
//
// UCX reads no length for the whole; the packer's own assertion is that the
// last interface ends exactly at the end, and so does this check.

namespace ferry::transport::worker_address {

namespace {

constexpr std::uint8_t version_v1 = 0;  // UCP_OBJECT_VERSION_V1
constexpr std::uint8_t version_v2 = 1;  // UCP_OBJECT_VERSION_V2
constexpr std::uint8_t header_version_mask = 0x0f;

constexpr std::uint8_t flag_debug_info = 0x01;
constexpr std::uint8_t flag_worker_uuid = 0x02;
constexpr std::uint8_t flag_client_id = 0x04;
constexpr std::uint8_t flag_am_only = 0x08;
constexpr std::uint8_t known_header_flags = flag_debug_info | flag_worker_uuid | flag_client_id | flag_am_only;

constexpr std::uint8_t null_resource = 0xff;
constexpr std::uint8_t flag_last = 0x80;
constexpr std::uint8_t md_empty_dev = 0x80;
constexpr std::uint8_t md_mask_v1 = 0x1f;
constexpr std::uint8_t md_mask_v2 = 0x7f;
constexpr std::uint8_t dev_num_paths = 0x40;
constexpr std::uint8_t dev_sys_device = 0x20;
constexpr std::uint8_t dev_len_mask = 0x1f;
constexpr std::uint8_t iface_has_ep_addr = 0x40;
constexpr std::uint8_t iface_len_mask = 0x3f;
constexpr std::size_t iface_attrs_v1 = 16;  // ucp_address_packed_iface_attr_t
constexpr std::size_t iface_attrs_v2 = 8;   // ucp_address_v2_packed_iface_attr_t

// UCX keeps a peer's memory domains in 64-bit maps and its interfaces in a
// list of UCP_MAX_RESOURCES (128): indices past either are not a real peer's.
constexpr unsigned max_md_index = 63;
constexpr unsigned max_interfaces = 128;

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::size_t at() const noexcept { return at_; }
  std::size_t left() const noexcept { return bytes_.size() - at_; }

  std::optional<std::uint8_t> byte() {
    if (left() == 0) return std::nullopt;
    return bytes_[at_++];
  }
  std::optional<std::uint8_t> peek() const {
    if (left() == 0) return std::nullopt;
    return bytes_[at_];
  }
  bool skip(std::size_t n) {
    if (n > left()) return false;
    at_ += n;
    return true;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

std::string at(std::size_t offset, const std::string& what) {
  return "at byte " + std::to_string(offset) + ": " + what;
}

std::string short_of(const Reader& r, const std::string& what, std::size_t needed) {
  return at(r.at(), what + " needs " + std::to_string(needed) + " bytes, " + std::to_string(r.left()) + " left");
}

// A length or index in the low bits of `first`; in v2, all of them set means
// the value is the whole next byte (ucp_address_unpack_byte_extended).
std::optional<unsigned> extended(Reader& r, std::uint8_t first, std::uint8_t mask, bool v2) {
  const unsigned value = first & mask;
  if (!v2 || value != mask) return value;
  return r.byte();
}

}  // namespace

std::string check(std::span<const std::uint8_t> address) {
  Reader r(address);
  if (address.empty()) return "the address is empty";
  const std::uint8_t first = *r.byte();
  const std::uint8_t version = first & header_version_mask;
  if (version != version_v1 && version != version_v2)
    return at(0, "address version " + std::to_string(version) + " (UCX 1.13 knows 0 and 1)");
  const bool v2 = version == version_v2;
  std::uint8_t flags = first >> 4;
  if (v2) {  // the high bits of the first byte: a release number UCX 1.13 neither packs nor reads
    const auto second = r.byte();
    if (!second) return short_of(r, "the header", 1);
    flags = *second;
  }
  if ((flags & ~known_header_flags) != 0) return at(v2 ? 1 : 0, "unknown address flags " + std::to_string(flags));
  // A v1 address without the flag still has its uuid for UCX (packed by
  // UCX before 1.12): ambiguous, and no UCX that Ferry runs packs it so.
  if ((flags & flag_worker_uuid) == 0) return at(v2 ? 1 : 0, "no worker uuid");
  if (!r.skip(8)) return short_of(r, "the worker uuid", 8);
  if ((flags & flag_client_id) != 0 && !r.skip(8)) return short_of(r, "the client id", 8);
  if ((flags & flag_debug_info) != 0) {
    const auto length = r.byte();
    if (!length) return short_of(r, "the worker name's length", 1);
    if (!r.skip(*length)) return short_of(r, "the worker name", *length);
  }
  if (r.peek() == null_resource) return at(r.at(), "the address names no transports");

  const std::uint8_t md_mask = v2 ? md_mask_v2 : md_mask_v1;
  const std::size_t attrs = v2 ? iface_attrs_v2 : iface_attrs_v1;
  unsigned interfaces = 0;
  for (unsigned device = 0;; ++device) {
    const std::string which = "device " + std::to_string(device);
    const std::size_t md_at = r.at();
    const auto md_byte = r.byte();
    if (!md_byte) return short_of(r, which + "'s memory domain", 1);
    const auto md = extended(r, *md_byte, md_mask, v2);
    if (!md) return short_of(r, which + "'s memory domain", 1);
    if (*md > max_md_index) return at(md_at, which + " names memory domain " + std::to_string(*md));
    const bool empty = (*md_byte & md_empty_dev) != 0;

    const auto dev_byte = r.byte();
    if (!dev_byte) return short_of(r, which + "'s address length", 1);
    const auto dev_len = extended(r, *dev_byte, dev_len_mask, v2);
    if (!dev_len) return short_of(r, which + "'s address length", 1);
    if ((*dev_byte & dev_num_paths) != 0) {
      const auto paths = r.byte();
      if (!paths) return short_of(r, which + "'s number of paths", 1);
      if (*paths == 0) return at(r.at() - 1, which + " has no paths");
    }
    if ((*dev_byte & dev_sys_device) != 0 && !r.skip(1)) return short_of(r, which + "'s system device", 1);
    if (!r.skip(*dev_len)) return short_of(r, which + "'s address", *dev_len);

    for (bool last_interface = empty; !last_interface;) {
      const std::string iface = "interface " + std::to_string(interfaces);
      if (++interfaces > max_interfaces)
        return at(r.at(), "more than " + std::to_string(max_interfaces) + " interfaces");
      if (!r.skip(2 + attrs)) return short_of(r, iface + "'s transport and attributes", 2 + attrs);
      const std::size_t len_at = r.at();
      const auto len_byte = r.byte();
      if (!len_byte) return short_of(r, iface + "'s address length", 1);
      const auto len = extended(r, *len_byte, iface_len_mask, v2);
      if (!len) return short_of(r, iface + "'s address length", 1);
      if ((*len_byte & iface_has_ep_addr) != 0) return at(len_at, iface + " carries endpoint addresses");
      if (!r.skip(*len)) return short_of(r, iface + "'s address", *len);
      last_interface = (*len_byte & flag_last) != 0;
    }
    if ((*dev_byte & flag_last) != 0) break;
  }
  if (r.left() != 0) return at(r.at(), std::to_string(r.left()) + " bytes past the last device");
  return {};
}

}  // namespace ferry::transport::worker_address
