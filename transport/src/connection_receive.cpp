// The worker's AM handlers: each kind of message from a peer (a message,
// a batch, a close notice, a pulled payload, a pull control message) and an
// endpoint's failure, handed to the connection it came for.
#include "connection_impl.hpp"
#include "ferry/log.hpp"
#include "incoming_messages.hpp"
#include "little_endian.hpp"
#include "send_op.hpp"

namespace ferry::transport {

namespace {

// The connection endpoint `ep` belongs to, or null: none (closing: what
// comes on it is dropped), or one whose destructor waits for this thread to
// unregister it.
std::shared_ptr<ConnectionImpl> connection_on(Worker::Impl& impl, ucp_ep_h ep) {
  auto found = impl.connections.find(ep);
  if (found == impl.connections.end()) return nullptr;
  return std::static_pointer_cast<ConnectionImpl>(found->second->weak_from_this().lock());
}

// The generation (UCX worker) an AM handler was registered on: its `arg`.
Worker::Impl::Generation& generation_of(void* arg) { return *static_cast<Worker::Impl::Generation*>(arg); }

// The connection an AM from `param`'s reply endpoint belongs to, or null.
std::shared_ptr<ConnectionImpl> connection_of(void* arg, const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  return connection_on(*generation_of(arg).impl, param->reply_ep);
}

// With no header, `header` is undefined (UCX's words), not null.
std::span<const std::byte> header_bytes(const void* header, std::size_t header_length) {
  if (header_length == 0) return {};
  return {static_cast<const std::byte*>(header), header_length};
}

}  // namespace

ucs_status_t am_receive(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                        const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    log().warn("ucx: dropped a message without a reply endpoint (not from a Ferry peer?)");
    return UCS_OK;
  }
  auto connection = connection_of(arg, param);
  if (!connection) return UCS_OK;
  auto& self = *connection;
  const bool bulk = self.came_on_bulk_lane(param->reply_ep);
  IncomingMessage message(generation_of(arg), header_bytes(header, header_length), data, length,
                          (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0, bulk ? &self : nullptr);
  self.deliver(message);
  if (bulk) self.settle_close();
  return message.status();
}

ucs_status_t batch_receive(void* arg, const void*, std::size_t, void* data, std::size_t length,
                           const ucp_am_recv_param_t* param) {
  auto connection = connection_of(arg, param);
  if (!connection) return UCS_OK;
  auto& self = *connection;
  // Framing only: each frame is then a message like any other (opened and
  // authenticated by deliver on a sealed connection).
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    self.reject("a batch of messages came by rendezvous, not eagerly");
    return UCS_OK;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  for (std::size_t at = 0; at < length && !self.closed();) {
    // An empty frame is an empty header, as a message alone may have one
    // (the protocol, not the framing, refuses it).
    if (length - at < frame_prefix || get_le<std::uint32_t>(bytes + at) > length - at - frame_prefix) {
      self.reject("a malformed batch of messages");
      break;
    }
    const std::uint32_t n = get_le<std::uint32_t>(bytes + at);
    at += frame_prefix;
    IncomingMessage message(generation_of(arg), {bytes + at, n}, nullptr, 0, false);
    self.deliver(message);
    at += n;
  }
  return UCS_OK;
}

ucs_status_t close_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t,
                          const ucp_am_recv_param_t* param) {
  auto connection = connection_of(arg, param);
  if (!connection) return UCS_OK;
  auto& self = *connection;
  // No header: nothing went on a bulk lane (or the peer predates the count).
  std::uint64_t bulk_sent = 0;
  if (header_length == sizeof bulk_sent) {
    bulk_sent = get_le<std::uint64_t>(static_cast<const std::byte*>(header));
  } else if (header_length != 0) {
    self.reject("a malformed close notice");
    return UCS_OK;
  }
  log().debug("ucx: {} closed the connection", self.peer());
  self.peer_closed(bulk_sent);
  return UCS_OK;
}

ucs_status_t pull_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t length,
                          const ucp_am_recv_param_t* param) {
  auto connection = connection_of(arg, param);
  if (!connection) return UCS_OK;
  const auto bytes = header_bytes(header, header_length);
  const auto descriptor = pull::read_descriptor(bytes);
  // Only from a peer whose probe this end read: one it can pull from.
  if (!descriptor || length != 0 || !connection->pulls_from_peer()) {
    connection->reject("a pulled payload this end did not agree to");
    return UCS_OK;
  }
  PulledMessage message(*connection, bytes.subspan(pull::descriptor_bytes), *descriptor);
  connection->deliver(message);
  // Dropped by the handler: the sender may let it go.
  if (!message.taken()) connection->send_control(pull::released(descriptor->token, true));
  return UCS_OK;
}

ucs_status_t pull_control_receive(void* arg, const void* header, std::size_t header_length, void*, std::size_t length,
                                  const ucp_am_recv_param_t* param) {
  auto connection = connection_of(arg, param);
  if (!connection) return UCS_OK;
  const auto message = pull::read_control(header_bytes(header, header_length));
  if (!message || length != 0) {
    connection->reject("a malformed pull control message");
    return UCS_OK;
  }
  connection->on_pull_control(*message);
  return UCS_OK;
}

void endpoint_failed(void* arg, ucp_ep_h ep, ucs_status_t status) {
  if (auto connection = connection_on(*static_cast<Worker::Impl*>(arg), ep)) connection->fail(status);
}

}  // namespace ferry::transport
