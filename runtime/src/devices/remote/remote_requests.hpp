// The connection a remote device uses now, and the requests on it: each has
// an id, its reply completes its future (RpcClient matches them), and a
// connection that goes fails every request still waiting. The connection is
// replaced when the host is reached again; a request always goes out on the
// one in use, and fails at once when there is none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "ferry/transport/identity.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/rpc_client.hpp"

namespace ferry::detail {

class RemoteRequests {
 public:
  // `peer`: the host's address, for errors.
  explicit RemoteRequests(std::string peer) : rpc_(std::move(peer)) {}

  // A new connection, authenticated; `host_key` is what its handshake proved the host is.
  void use(std::shared_ptr<transport::Connection> connection, const transport::PublicKey& host_key);
  // Takes the connection out of use (to close it); null when there was none.
  std::shared_ptr<transport::Connection> take();
  std::shared_ptr<transport::Connection> connection() const;
  bool in_use(const transport::Connection* connection) const;
  transport::PublicKey host_key() const;

  std::uint64_t next_id() noexcept { return rpc_.next_id(); }
  std::future<protocol::Message> request(std::uint64_t id, const protocol::Message& message, const void* payload,
                                         std::size_t bytes, transport::RpcClient::Destination dest = {},
                                         bool soon = false);
  // A task's run, encoded straight from it (no copy into a Message).
  std::future<protocol::Message> request_run(const protocol::Run& run, bool soon = false);
  // The reply; this thread takes it in itself when it comes soon (Connection::wait_here).
  protocol::Message await(std::future<protocol::Message>& reply, const char* what);
  // A message that wants no reply (a free, a goodbye); nothing without a connection.
  void send(std::vector<std::byte> header);
  // What the connection holds back to send with company leaves now.
  void push();

  // Progress thread: a reply came (RpcClient::complete).
  transport::RpcClient::Completion complete(std::uint64_t id, const protocol::Message& reply,
                                            transport::Incoming& incoming) {
    return rpc_.complete(id, reply, incoming);
  }
  void fail_all(const std::string& reason) { rpc_.fail_all(reason); }
  std::size_t waiting() { return rpc_.waiting(); }

 private:
  transport::RpcClient rpc_;
  mutable std::mutex mutex_;
  std::shared_ptr<transport::Connection> connection_;
  transport::PublicKey host_key_{};
};

}  // namespace ferry::detail
