// A connection's pulled payloads (pull.hpp): the probes both ways, payloads
// named to the peer until it releases them, and pulls out of the peer.
#include <random>

#include "connection_impl.hpp"
#include "ferry/log.hpp"
#include "send_op.hpp"

namespace ferry::transport {

void ConnectionImpl::offer_pulls(pid_t peer_pid, bool accepted) {
  if (channel_) return;  // a sealed payload is opened by its receiver: it must travel
  // FERRY_PULL_PAYLOADS=0 here keeps this end from pulling as well as from being pulled.
  peer_pid_ = pull::enabled() ? peer_pid : 0;
  accepted_ = accepted;
  if (!accepted) send_probe();
}

void ConnectionImpl::send_probe() {
  probe_sent_ = true;
  const bool offer = pull::enabled();
  if (offer) {
    std::random_device random;
    for (auto& b : probe_) b = static_cast<std::byte>(random());
  }
  send_control(pull::probe(offer ? &probe_ : nullptr));
}

void ConnectionImpl::send_control(std::vector<std::byte> message) {
  send_now(std::make_unique<SendOp>(std::move(message), nullptr, 0, Done{}, ferry_pull_control_am_id));
}

void ConnectionImpl::on_pull_control(const pull::ControlMessage& message) {
  switch (message.kind) {
    case pull::Control::probe: {
      if (accepted_ && !probe_sent_ && lane_ != nullptr) send_probe();
      if (message.address == 0 || peer_pid_ == 0 || pulls_from_peer_) return;
      pull::ProbeBytes read{};
      const std::string error = pull::read_from(peer_pid_, message.address, read.data(), read.size());
      if (!error.empty() || read != message.bytes) {
        log().debug("ucx: {}'s payloads travel (its probe did not read back: {})", peer_,
                    error.empty() ? "other bytes" : error);
        return;
      }
      pulls_from_peer_ = true;
      log().debug("ucx: this end pulls {}'s payloads out of its memory", peer_);
      return send_control(pull::probed());
    }
    case pull::Control::probed:
      if (!probe_sent_ || !pull::enabled()) return reject("the peer answered a probe this end did not send");
      peer_pulls_.store(true, std::memory_order_relaxed);
      log().debug("ucx: {} pulls this end's payloads out of its memory", peer_);
      return;
    case pull::Control::released:
      return release(message.token, message.ok ? std::string() : "the peer could not read the payload");
  }
}

void ConnectionImpl::send_pulled(std::unique_ptr<SendOp> op) {
  const std::uint64_t token = next_pull_++;
  std::vector<std::byte> header;
  header.reserve(pull::descriptor_bytes + op->header.size());
  pull::append(header, {token, reinterpret_cast<std::uintptr_t>(op->payload), op->payload_bytes});
  header.insert(header.end(), op->header.begin(), op->header.end());
  // The descriptor's own send failing means the peer never saw it.
  std::weak_ptr<ConnectionImpl> weak = self();
  auto carrier = std::make_unique<SendOp>(
      std::move(header), nullptr, 0,
      [weak, token](const std::string& error) {
        if (error.empty()) return;
        if (auto connection = weak.lock()) connection->release(token, error);
      },
      ferry_pull_am_id);
  pulled_.emplace(token, std::move(op));
  send_now(std::move(carrier));
}

void ConnectionImpl::release(std::uint64_t token, const std::string& error) {
  const auto it = pulled_.find(token);
  if (it == pulled_.end()) return;  // failed already (its descriptor's send, then the peer's answer)
  auto op = std::move(it->second);
  pulled_.erase(it);
  notify(op->done, error);
}

void ConnectionImpl::fail_pulled(const std::string& reason) {
  auto pending = std::exchange(pulled_, {});
  for (auto& [token, op] : pending) notify(op->done, reason);
}

void ConnectionImpl::pull_into(const pull::Descriptor& d, void* dest, Done done) {
  // Payloads smaller than this are copied on the progress thread: a
  // hand-off costs two wake-ups, more than copying 256 KiB.
  constexpr std::size_t pull_elsewhere_from = std::size_t{256} << 10;
  const auto finish = [](ConnectionImpl& connection, std::uint64_t token, const std::string& error, const Done& done) {
    connection.send_control(pull::released(token, error.empty()));
    if (error.empty()) connection.impl_.pulled_payloads.fetch_add(1, std::memory_order_relaxed);
    notify(done, error.empty() ? error : "pulling a payload: " + error);
  };
  if (d.bytes < pull_elsewhere_from)
    return finish(*this, d.token, pull::read_from(peer_pid_, d.address, dest, d.bytes), done);
  // Keyed by the payload: a transfer's chunks in flight copy side by side.
  openers().run(d.token, [connection = self(), pid = peer_pid_, d, dest, finish, done = std::move(done)]() mutable {
    std::string error = pull::read_from(pid, d.address, dest, d.bytes);
    // The connection moves on to the progress thread: were this thread to
    // drop the last reference, the worker it keeps alive would end here
    // and join this very thread.
    auto& target = *connection;
    target.post([connection = std::move(connection), token = d.token, error = std::move(error), finish,
                 done = std::move(done)] { finish(*connection, token, error, done); });
  });
}

}  // namespace ferry::transport
