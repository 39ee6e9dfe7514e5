#include "devices/remote/remote_requests.hpp"

#include <utility>

namespace ferry::detail {

void RemoteRequests::use(std::shared_ptr<transport::Connection> connection, const transport::PublicKey& host_key) {
  std::lock_guard lock(mutex_);
  connection_ = std::move(connection);
  host_key_ = host_key;
}

std::shared_ptr<transport::Connection> RemoteRequests::take() {
  std::lock_guard lock(mutex_);
  return std::move(connection_);
}

std::shared_ptr<transport::Connection> RemoteRequests::connection() const {
  std::lock_guard lock(mutex_);
  return connection_;
}

bool RemoteRequests::in_use(const transport::Connection* connection) const {
  std::lock_guard lock(mutex_);
  return connection_.get() == connection;
}

transport::PublicKey RemoteRequests::host_key() const {
  std::lock_guard lock(mutex_);
  return host_key_;
}

std::future<protocol::Message> RemoteRequests::request(std::uint64_t id, const protocol::Message& message,
                                                       const void* payload, std::size_t bytes,
                                                       transport::RpcClient::Destination dest, bool soon) {
  return rpc_.request(connection(), id, message, payload, bytes, dest, soon);
}

std::future<protocol::Message> RemoteRequests::request_run(const protocol::Run& run, bool soon) {
  auto header = protocol::encode(run);  // first: a run that cannot be encoded leaves nothing pending
  return rpc_.request_encoded(connection(), run.request, std::move(header), nullptr, 0, {}, soon);
}

protocol::Message RemoteRequests::await(std::future<protocol::Message>& reply, const char* what) {
  return rpc_.await(reply, what, connection().get());
}

void RemoteRequests::send(std::vector<std::byte> header) {
  if (auto connection = this->connection()) connection->send(std::move(header));
}

void RemoteRequests::push() {
  if (auto connection = this->connection()) connection->push();
}

}  // namespace ferry::detail
