// RpcClient over real UCX on loopback: a server that answers every ping with
// a pong and every get with data (a payload), and a client matching replies.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <mutex>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/rpc_client.hpp"
#include "ferry/transport/worker.hpp"
#include "bootstrap_pair.hpp"

namespace ferry::transport {
namespace {

// Answers pings with pongs, in reverse order of pairs, so replies arrive out
// of request order; answers a get with `length` bytes of value offset & 0xff.
struct Answering {
  Answering() {
    worker = Worker::create({"rpc-server"});
    listener = testing::listen(worker, [this](std::shared_ptr<Connection> c) {
      c->set_handlers([this](Connection& connection, Incoming& in) { answer(connection, in); }, {});
      std::lock_guard lock(mutex);
      accepted.push_back(std::move(c));
    });
  }
  ~Answering() {
    listener.reset();
    std::lock_guard lock(mutex);
    for (auto& c : accepted) c->close();
  }
  void answer(Connection& connection, Incoming& in) {
    const protocol::Message m = protocol::decode(in.header());
    if (const auto* ping = std::get_if<protocol::Ping>(&m)) {
      held.push_back(ping->request);
      if (held.size() == 2) {
        for (auto it = held.rbegin(); it != held.rend(); ++it) connection.send(protocol::encode(protocol::Pong{*it}));
        held.clear();
      }
    } else if (const auto* get = std::get_if<protocol::Get>(&m)) {
      auto data = std::make_shared<std::vector<std::byte>>(get->length, static_cast<std::byte>(get->offset & 0xff));
      connection.send(protocol::encode(protocol::Data{get->request, get->buffer, get->offset, protocol::Status::ok, {}}),
                      data->data(), data->size(), [data](const std::string&) {});
    }
  }
  std::shared_ptr<Worker> worker;
  std::unique_ptr<BootstrapServer> listener;
  std::mutex mutex;
  std::vector<std::shared_ptr<Connection>> accepted;
  std::vector<std::uint64_t> held;  // progress thread only
};

struct Caller {
  explicit Caller(std::uint16_t port) : rpc("test-peer") {
    worker = Worker::create({"rpc-client"});
    connection = testing::connect(
        worker, port,
        [this](Connection&, Incoming& in) {
          const protocol::Message m = protocol::decode(in.header());
          std::visit([&](const auto& r) {
            if constexpr (requires { r.request; }) rpc.complete(r.request, m, in);
          }, m);
        },
        [this](Connection&, const std::string& reason) { rpc.fail_all(reason); });
  }
  ~Caller() { connection->close(); }
  RpcClient rpc;
  std::shared_ptr<Worker> worker;
  std::shared_ptr<Connection> connection;
};

TEST(RpcClient, RepliesOutOfOrderReachTheirRequests) {
  Answering server;
  Caller client(server.listener->port());
  std::vector<std::pair<std::uint64_t, std::future<protocol::Message>>> calls;
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t id = client.rpc.next_id();
    calls.emplace_back(id, client.rpc.request(client.connection, id, protocol::Ping{id}));
  }
  for (auto& [id, future] : calls) {
    const protocol::Message reply = client.rpc.await(future, "ping");
    ASSERT_TRUE(std::holds_alternative<protocol::Pong>(reply));
    EXPECT_EQ(std::get<protocol::Pong>(reply).request, id);
  }
}

TEST(RpcClient, DataRepliesLandWhereTheRequestSaid) {
  Answering server;
  Caller client(server.listener->port());
  for (std::size_t bytes : {std::size_t{0}, std::size_t{100}, std::size_t{3} << 20}) {
    std::vector<std::byte> dest(bytes + 1, std::byte{0x5a});
    const std::uint64_t id = client.rpc.next_id();
    auto future = client.rpc.request(client.connection, id, protocol::Get{id, 1, 7, bytes}, nullptr, 0, dest.data());
    const protocol::Message reply = client.rpc.await(future, "get");
    ASSERT_TRUE(std::holds_alternative<protocol::Data>(reply));
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(dest[i], std::byte{7}) << "byte " << i << " of " << bytes;
    EXPECT_EQ(dest[bytes], std::byte{0x5a}) << "written past the reply";
  }
}

TEST(RpcClient, NoConnectionAndLostConnectionFailTheRequest) {
  RpcClient rpc("nowhere");
  auto unsent = rpc.request(nullptr, 1, protocol::Ping{1});
  EXPECT_THROW(rpc.await(unsent, "ping"), RemoteError);

  Answering server;
  Caller client(server.listener->port());
  const std::uint64_t id = client.rpc.next_id();
  auto waiting = client.rpc.request(client.connection, id, protocol::Ping{id});  // held: pongs come in pairs
  client.rpc.fail_all("the test pulled the plug");
  try {
    client.rpc.await(waiting, "ping");
    ADD_FAILURE() << "the request survived fail_all";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("the test pulled the plug"), std::string::npos) << e.what();
  }
}

TEST(RpcClient, AMessageThatCannotBeEncodedLeavesNothingPending) {
  Answering server;
  Caller client(server.listener->port());
  protocol::Run run{.request = 5, .kernel = std::string(protocol::max_string_bytes + 1, 'k'), .task = "t", .args = {}};
  EXPECT_THROW(client.rpc.request(client.connection, 5, run), ProtocolError);
  EXPECT_FALSE([&] {
    struct None : Incoming {
      std::span<const std::byte> header() const noexcept override { return {}; }
      std::size_t payload_bytes() const noexcept override { return 0; }
      void into(void*, std::function<void(const std::string&)>) override {}
    } none;
    return client.rpc.complete(5, protocol::Done{}, none);
  }()) << "a reply for the refused request found it pending";
}

}  // namespace
}  // namespace ferry::transport
