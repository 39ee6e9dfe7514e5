// A connection's endpoints: the control endpoint, and the shared-memory
// lane or the bulk lanes agreed in the bootstrap; made together, closed in
// the order they must go.
#include "connection_impl.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "send_op.hpp"
#include "worker_address.hpp"

namespace ferry::transport {

std::shared_ptr<Connection> Connection::to_worker(const std::shared_ptr<Worker>& worker,
                                                  std::span<const std::uint8_t> worker_address, std::string peer,
                                                  std::unique_ptr<SecureChannel> channel, MessageHandler on_message,
                                                  ErrorHandler on_error, protocol::Lane lane, bool accepted,
                                                  pid_t peer_pid, std::span<const std::uint8_t> local_address,
                                                  std::span<const std::uint8_t> network_address) {
  // The one door to ucp_ep_create for a peer's bytes: UCX trusts them (an
  // unknown version is an assertion, a long length a read past the end).
  if (const std::string why = worker_address::check(worker_address); !why.empty())
    throw ProtocolError("the UCX worker address of " + peer + " is unusable: " + why);
  if (!network_address.empty())
    if (const std::string why = worker_address::check(network_address); !why.empty())
      throw ProtocolError("the UCX network address of " + peer + " is unusable: " + why);
  auto connection = std::make_shared<ConnectionImpl>(worker, std::move(on_message), std::move(on_error));
  connection->secure(std::move(channel));
  auto create = [&] {
    auto& impl = worker->impl();
    auto& generation = impl.generation_for(local_address);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    // The control endpoint and bulk lanes on the network (TCP), even to a
    // process on this host: UCX's shared-memory transports have peer error
    // handling here (Worker::create), and on them a peer's death is noticed
    // only by UCX's keepalive, seconds later, not as its socket closes.
    const auto& network = network_address.empty() ? worker_address : network_address;
    params.address = reinterpret_cast<const ucp_address_t*>(network.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = endpoint_failed;
    params.err_handler.arg = &impl;
    ucp_ep_h ep = nullptr;
    check(ucp_ep_create(generation.worker, &params, &ep), "ucp_ep_create to the worker of " + peer);
    impl.adopt(ep, generation);
    ++generation.connections;
    connection->attach(ep, peer, {generation.address, generation.network_address});
    if (lane == protocol::Lane::bulk) {
      // Created after the control endpoint on both ends, the dialer's
      // payloads' first, so UCX pairs them as it pairs the control
      // endpoints. Peer error handling like the control endpoint's.
      ucp_ep_h lanes[2] = {nullptr, nullptr};
      for (ucp_ep_h& bulk : lanes) {
        const auto status = ucp_ep_create(generation.worker, &params, &bulk);
        if (status == UCS_OK) impl.adopt(bulk, generation);
        if (status != UCS_OK) {
          for (ucp_ep_h made : lanes)
            if (made != nullptr) impl.close_endpoint(made, Worker::Impl::Close::force, false);
          connection->close_now(ConnectionImpl::Ending::peer_gone);
          throw_ucx(status, "ucp_ep_create (bulk lane) to the worker of " + peer);
        }
      }
      connection->attach_bulk(lanes[accepted ? 1 : 0], lanes[accepted ? 0 : 1]);
      return;
    }
    if (lane != protocol::Lane::shared_memory) return;
    // Created second on both ends, so UCX pairs the lanes as it pairs the
    // control endpoints, from the whole address: shared memory. With a peer
    // that sent its network address, with peer error handling, which UCX's
    // shared-memory transports offer when asked (Worker::create): it can
    // then be force-closed, and so freed. A peer that sent none (an older
    // one) gets a lane without error handling, as it makes its own.
    params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
    const bool handled = !network_address.empty();
    if (!handled) {
      params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    }
    ucp_ep_h lane_ep = nullptr;
    const auto status = ucp_ep_create(generation.worker, &params, &lane_ep);
    if (status == UCS_OK) impl.adopt(lane_ep, generation);
    if (status != UCS_OK) {
      connection->close_now(ConnectionImpl::Ending::peer_gone);
      throw_ucx(status, "ucp_ep_create (shared-memory lane) to the worker of " + peer);
    }
    connection->attach_lane(lane_ep, accepted, handled);
    connection->offer_pulls(peer_pid, accepted);
  };
  if (worker->on_progress_thread()) {
    create();
  } else {
    worker->call(create);
  }
  log().debug("ucx: endpoint to the worker of {}{}{}", peer, connection->encrypted() ? " (sealed)" : "",
              lane == protocol::Lane::shared_memory ? " with a shared-memory lane"
              : lane == protocol::Lane::bulk        ? " with bulk lanes"
                                                    : "");
  return connection;
}

void ConnectionImpl::attach(ucp_ep_h ep, std::string peer, Worker::Addresses local) {
  gather_soon_ = impl_.sends_are_system_calls;
  ep_ = ep;
  peer_ = std::move(peer);
  local_addresses_ = std::move(local);
  impl_.connections[ep] = this;
}

void ConnectionImpl::attach_lane(ucp_ep_h lane, bool accepted, bool handled) {
  lane_accepted_ = accepted;
  lane_handled_ = handled;
  // Gathered here too, though a send on shared memory is a store: a peer
  // asleep on its fd is signalled per message (a system call each side and
  // a wake-up), once per batch gathered. A 20,000-task chain on the lane,
  // 24 alternating runs each: median 3.49 µs/task sending at once (2.79-5.49),
  // 3.19 gathered (2.82-3.74).
  lane_ = lane;
  impl_.connections[lane] = this;
  ++impl_.shared_memory_lanes;
}

void ConnectionImpl::attach_bulk(ucp_ep_h out, ucp_ep_h in) {
  bulk_out_ = out;
  bulk_in_ = in;
  impl_.connections[out] = this;
  impl_.connections[in] = this;
  if (channel_) channel_->number_payloads_apart();
}

ConnectionImpl::Endpoints ConnectionImpl::take_endpoints() {
  Endpoints eps{std::exchange(ep_, nullptr), std::exchange(lane_, nullptr), std::exchange(bulk_out_, nullptr),
                std::exchange(bulk_in_, nullptr), bulk_sent_, lane_handled_};
  for (ucp_ep_h ep : {eps.ep, eps.lane, eps.bulk_out, eps.bulk_in})
    if (ep != nullptr) impl_.connections.erase(ep);
  if (eps.lane != nullptr) --impl_.shared_memory_lanes;
  return eps;
}

// The bulk lanes first and without a notice (the control endpoint carries
// the connection's); the lane's close notice follows the messages on it, and
// the control endpoint then goes without one, which could overtake them.
//
// Only a forced close frees a connected endpoint before its worker ends
// (Worker::Impl::Close). A flushed close keeps the peer from hearing of the
// close before its notice, which it would if the endpoints went at once
// (the lane's notice overtaken; a bulk lane's end read as a failure). A
// peer that said goodbye reads nothing more: its endpoints are flushed, then
// forced, and freed. A peer that is gone or silent has them forced at once.
//
// The lane is flushed, then forced, where the others are only flushed: with
// error handling UCX 1.13 tracks its sends, and a rendezvous send still
// waiting for a peer that stopped answering survives a flushed close; the
// worker's destruction then asserts on it (ucp_ep.c:437). A forced close
// cancels it. A lane without error handling (to an older peer) is never
// forced: UCX refuses to force-close one. It closes with a flush (a worker's
// shutdown bounds the wait), without the notice when the peer is gone, or
// not at all when the peer stopped answering: the flush would wait for it,
// UCX 1.13 aborts the process if the worker is destroyed under a close in
// flight, and the worker's destruction takes it down.
void ConnectionImpl::close_endpoints(Worker::Impl& impl, const Endpoints& eps, Ending how) {
  using Close = Worker::Impl::Close;
  const bool flushed = flushes(how);
  const Close close = how == Ending::flushed ? Close::flush : how == Ending::peer_leaving ? Close::flush_force : Close::force;
  for (ucp_ep_h bulk : {eps.bulk_out, eps.bulk_in})
    if (bulk != nullptr) impl.close_endpoint(bulk, close, false);
  if (eps.lane != nullptr) {
    if (eps.lane_handled) impl.close_endpoint(eps.lane, close == Close::flush ? Close::flush_force : close, flushed);
    else if (how != Ending::peer_silent) impl.close_endpoint(eps.lane, Close::flush, flushed);
    else impl.leave_open(eps.lane);
  }
  if (eps.ep != nullptr) impl.close_endpoint(eps.ep, close, eps.lane == nullptr, eps.bulk_sent);
}

void ConnectionImpl::drop_endpoints(Ending how) {
  // Not from inside an endpoint's own error callback, hence posted.
  impl_.post([impl = &impl_, eps = take_endpoints(), how] { close_endpoints(*impl, eps, how); });
}

}  // namespace ferry::transport
