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

}  // namespace

std::future<protocol::Message> RpcClient::request(const std::shared_ptr<Connection>& connection, std::uint64_t id,
                                                  const protocol::Message& message, const void* payload,
                                                  std::size_t bytes, void* dest, bool soon) {
  // First: a message that cannot be encoded leaves nothing pending.
  return request_encoded(connection, id, protocol::encode(message), payload, bytes, dest, soon);
}

std::future<protocol::Message> RpcClient::request_encoded(const std::shared_ptr<Connection>& connection,
                                                          std::uint64_t id, std::vector<std::byte> header,
                                                          const void* payload, std::size_t bytes, void* dest,
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

bool RpcClient::complete(std::uint64_t id, const protocol::Message& reply, Incoming& incoming) {
  std::shared_ptr<Pending> p = take(id);
  if (!p) return false;
  if (incoming.payload_bytes() == 0 || p->dest == nullptr) {
    p->reply.set_value(reply);
    return true;
  }
  {
    std::lock_guard lock(receiving_->mutex);
    receiving_->requests.emplace(id, p);
  }
  std::weak_ptr<Receiving> receiving = receiving_;
  incoming.into(p->dest, [p, id, receiving, reply](const std::string& error) {
    if (auto r = receiving.lock()) {
      std::lock_guard lock(r->mutex);
      r->requests.erase(id);
    }
    if (p->answered.exchange(true)) return;  // failed already (fail_all)
    if (error.empty()) p->reply.set_value(reply);
    else p->reply.set_exception(std::make_exception_ptr(RemoteError("receiving data: " + error)));
  });
  return true;
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

protocol::Message RpcClient::await(std::future<protocol::Message>& reply, const char* what,
                                   Connection* sent_on) const {
  if (sent_on != nullptr)
    sent_on->wait_here([&] { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  if (reply.wait_for(reply_limit) != std::future_status::ready)
    throw RemoteError(fmt::format("remote {}: no reply to {} in {} s", peer_, what, reply_limit.count()));
  return reply.get();
}

}  // namespace ferry::transport
