#include "ferry/transport/rpc_client.hpp"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "ferry/error.hpp"

namespace ferry::transport {

namespace {

// Long enough for a big kernel; a request without a reply for this long is a
// host that stopped answering without the connection noticing.
constexpr auto reply_limit = std::chrono::seconds(120);

// Why `reply`, carrying `payload` bytes, may not complete a request that
// expects `dest`; empty when it may. A get's data must be exactly what was
// asked: more would overrun the destination, fewer (none included) would
// leave its old bytes standing as the peer's answer. A refusal carries no
// bytes, and a request without a destination expects none.
std::string judge(const RpcClient::Destination& dest, const protocol::Message& reply, std::size_t payload) {
  const auto* data = std::get_if<protocol::Data>(&reply);
  const bool delivers = data != nullptr && data->status == protocol::Status::ok;
  if (dest.data == nullptr) {
    if (payload == 0) return {};
    return fmt::format("sent {} bytes with a {} to a request that expects none", payload,
                       protocol::to_string(protocol::type_of(reply)));
  }
  if (delivers) {
    if (payload == dest.bytes) return {};
    return fmt::format("sent {} bytes for a get of {}", payload, dest.bytes);
  }
  if (payload == 0) return {};  // a refusal: the caller says why
  if (data != nullptr)
    return fmt::format("sent {} bytes with a data reply of status {} for a get of {}", payload,
                       protocol::to_string(data->status), dest.bytes);
  return fmt::format("sent {} bytes with a {} for a get of {}", payload, protocol::to_string(protocol::type_of(reply)),
                     dest.bytes);
}

}  // namespace

std::future<protocol::Message> RpcClient::request(const std::shared_ptr<Connection>& connection, std::uint64_t id,
                                                  const protocol::Message& message, const void* payload,
                                                  std::size_t bytes, Destination dest, bool soon) {
  // First: a message that cannot be encoded leaves nothing pending.
  return request_encoded(connection, id, protocol::encode(message), payload, bytes, dest, soon);
}

std::future<protocol::Message> RpcClient::request_encoded(const std::shared_ptr<Connection>& connection,
                                                          std::uint64_t id, std::vector<std::byte> header,
                                                          const void* payload, std::size_t bytes, Destination dest,
                                                          bool soon) {
  auto pending = std::allocate_shared<Pending>(SmallObjectAllocator<Pending>{});
  pending->dest = dest;
  auto future = pending->reply.get_future();
  if (!connection) {
    pending->reply.set_exception(std::make_exception_ptr(RemoteError(fmt::format("remote {}: not connected", peer_))));
    return future;
  }
  {
    std::lock_guard lock(mutex_);
    pending_[id] = pending;
  }
  auto sent = [this, id](const std::string& error) {
    if (error.empty()) return;
    if (auto p = take(id)) p->reply.set_exception(std::make_exception_ptr(RemoteError(fmt::format("send failed: {}", error))));
  };
  if (soon && payload == nullptr && bytes == 0) connection->send_soon(std::move(header), std::move(sent));
  else connection->send(std::move(header), payload, bytes, std::move(sent));
  // Closed meanwhile (its peer lost): no reply will come, and fail_all may
  // have run before this request was registered. Its send may even have
  // succeeded: a shared-memory lane has no error handling of its own.
  if (connection->closed())
    if (auto p = take(id))
      p->reply.set_exception(std::make_exception_ptr(RemoteError(fmt::format("remote {}: connection closed", peer_))));
  return future;
}

std::shared_ptr<RpcClient::Pending> RpcClient::take(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return nullptr;
  auto p = std::move(it->second);
  pending_.erase(it);
  return p;
}

RpcClient::Completion RpcClient::complete(std::uint64_t id, const protocol::Message& reply, Incoming& incoming) {
  std::shared_ptr<Pending> p = take(id);
  if (!p) return {};
  // Not taken, the payload is dropped unread (Incoming): a rendezvous one is
  // released to its sender, an eager one discarded.
  if (const std::string why = judge(p->dest, reply, incoming.payload_bytes()); !why.empty()) {
    std::string broken = fmt::format("remote {}: {}", peer_, why);
    p->reply.set_exception(std::make_exception_ptr(RemoteError(broken)));
    fail_all(why);
    return {true, std::move(broken)};
  }
  if (incoming.payload_bytes() == 0) {
    p->reply.set_value(reply);
    return {true, {}};
  }
  {
    std::lock_guard lock(receiving_->mutex);
    receiving_->requests.emplace(id, p);
  }
  std::weak_ptr<Receiving> receiving = receiving_;
  incoming.into(p->dest.data, [p, id, receiving, reply](const std::string& error) {
    if (auto r = receiving.lock()) {
      std::lock_guard lock(r->mutex);
      r->requests.erase(id);
    }
    if (p->answered.exchange(true)) return;  // failed already (fail_all)
    if (error.empty()) p->reply.set_value(reply);
    else p->reply.set_exception(std::make_exception_ptr(RemoteError("receiving data: " + error)));
  });
  return {true, {}};
}

void RpcClient::fail_all(const std::string& reason) {
  PendingMap pending, receiving;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
  }
  {
    std::lock_guard lock(receiving_->mutex);
    receiving.swap(receiving_->requests);
  }
  for (auto& [id, p] : receiving)
    if (!p->answered.exchange(true)) pending.emplace(id, std::move(p));
  // In request order, so the oldest waiter hears first.
  std::map<std::uint64_t, std::shared_ptr<Pending>> ordered(pending.begin(), pending.end());
  for (auto& [id, p] : ordered)
    p->reply.set_exception(std::make_exception_ptr(RemoteError(fmt::format("remote {}: {}", peer_, reason))));
}

std::size_t RpcClient::waiting() {
  std::size_t n = 0;
  {
    std::lock_guard lock(mutex_);
    n += pending_.size();
  }
  std::lock_guard lock(receiving_->mutex);
  return n + receiving_->requests.size();
}

protocol::Message RpcClient::await(std::future<protocol::Message>& reply, const char* what,
                                   Connection* sent_on) const {
  if (sent_on != nullptr)
    sent_on->wait_here([&] { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  if (reply.wait_for(reply_limit) != std::future_status::ready)
    throw RemoteError(fmt::format("remote {}: no reply to {} in {} s", peer_, what, reply_limit.count()));
  return reply.get();
}

}  // namespace ferry::transport
