// RpcClient over real UCX on loopback: a server that answers every ping with
// a pong and every get with data (a payload), and a client matching replies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <ostream>
#include <thread>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/rpc_client.hpp"
#include "ferry/transport/worker.hpp"
#include "bootstrap_pair.hpp"

namespace ferry::transport {
namespace {

// A server on loopback that hands each message to `answer` (on its
// progress thread). Declared last in the servers below, so that it closes
// its connections before what `answer` uses is gone.
struct Serving {
  Serving(const char* name, std::function<void(Connection&, Incoming&)> answer)
      : worker(Worker::create({name})), accepting(worker, std::move(answer), {}) {}
  std::uint16_t port() const { return accepting.listener->port(); }
  std::shared_ptr<Worker> worker;
  testing::Accepting accepting;
};

// Answers pings with pongs, in reverse order of pairs, so replies arrive out
// of request order; answers a get with `length` bytes of value offset & 0xff.
struct Answering {
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
  std::vector<std::uint64_t> held;  // progress thread only
  Serving serving{"rpc-server", [this](Connection& c, Incoming& in) { answer(c, in); }};
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
  Caller client(server.serving.port());
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
  Caller client(server.serving.port());
  for (std::size_t bytes : {std::size_t{0}, std::size_t{100}, std::size_t{3} << 20}) {
    std::vector<std::byte> dest(bytes + 1, std::byte{0x5a});
    const std::uint64_t id = client.rpc.next_id();
    auto future = client.rpc.request(client.connection, id, protocol::Get{id, 1, 7, bytes}, nullptr, 0,
                                     RpcClient::Destination{dest.data(), bytes});
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
  Caller client(server.serving.port());
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
  Caller client(server.serving.port());
  protocol::Run run{.request = 5, .kernel = std::string(protocol::max_string_bytes + 1, 'k'), .task = "t", .args = {}};
  EXPECT_THROW(client.rpc.request(client.connection, 5, run), ProtocolError);
  EXPECT_FALSE([&] {
    struct None : Incoming {
      std::span<const std::byte> header() const noexcept override { return {}; }
      std::size_t payload_bytes() const noexcept override { return 0; }
      void into(void*, std::function<void(const std::string&)>) override {}
    } none;
    return client.rpc.complete(5, protocol::Done{}, none).matched;
  }()) << "a reply for the refused request found it pending";
}

// A server that lies: answers a get of n bytes with lie(n) bytes, or with
// a reply that is no data at all but carries a payload anyway.
struct Lying {
  enum class Reply { data, refused_data, pong };
  void answer(Connection& connection, Incoming& in) {
    const protocol::Message m = protocol::decode(in.header());
    if (const auto* ping = std::get_if<protocol::Ping>(&m)) {
      held.push_back(ping->request);  // never answered: a request that waits while the peer lies
      return;
    }
    const auto* get = std::get_if<protocol::Get>(&m);
    if (get == nullptr) return;
    // The first get of each pair is answered honestly, the second as the test says.
    const bool honest = honest_next.exchange(false);
    const std::size_t n = honest ? get->length : lie(get->length);
    auto data = std::make_shared<std::vector<std::byte>>(n, std::byte{0xee});
    std::vector<std::byte> header;
    if (honest || reply == Reply::data)
      header = protocol::encode(protocol::Data{get->request, get->buffer, get->offset, protocol::Status::ok, {}});
    else if (reply == Reply::refused_data)
      header = protocol::encode(
          protocol::Data{get->request, get->buffer, get->offset, protocol::Status::unknown_buffer, "no such buffer"});
    else
      header = protocol::encode(protocol::Pong{get->request});
    connection.send(std::move(header), data->data(), data->size(), [this, data](const std::string&) { ++sends_done; });
  }
  std::function<std::size_t(std::size_t)> lie = [](std::size_t n) { return n; };
  Reply reply = Reply::data;
  std::atomic<bool> honest_next{false};
  std::atomic<int> sends_done{0};
  std::vector<std::uint64_t> held;  // progress thread only
  Serving serving{"rpc-liar", [this](Connection& c, Incoming& in) { answer(c, in); }};
};

// Guard bytes on both sides of where a get's data may land.
struct Landing {
  static constexpr std::size_t guard = 4096;
  explicit Landing(std::size_t bytes) : bytes(bytes), memory(guard + bytes + guard, std::byte{0x5a}) {}
  std::byte* dest() { return memory.data() + guard; }
  // Index of the first byte that is no longer 0x5a, or npos.
  std::size_t first_touched() const {
    for (std::size_t i = 0; i < memory.size(); ++i)
      if (memory[i] != std::byte{0x5a}) return i;
    return std::string::npos;
  }
  std::size_t bytes;
  std::vector<std::byte> memory;
};

std::future<protocol::Message> get_into(Caller& client, Landing& landing) {
  const std::uint64_t id = client.rpc.next_id();
  return client.rpc.request(client.connection, id, protocol::Get{id, 1, 0, landing.bytes}, nullptr, 0,
                            RpcClient::Destination{landing.dest(), landing.bytes});
}

struct Lie {
  const char* name;
  Lying::Reply reply;
  std::size_t asked;
  std::size_t sent;
  const char* says;  // what the request's failure must say
};

// Named in test lists by its name, not its bytes.
void PrintTo(const Lie& lie, std::ostream* os) { *os << lie.name; }

class RpcClientLies : public ::testing::TestWithParam<Lie> {};

TEST_P(RpcClientLies, NeverTouchDestAndFailTheRequestNamingTheSizes) {
  const Lie lie = GetParam();
  Lying server;
  server.reply = lie.reply;
  server.lie = [sent = lie.sent](std::size_t) { return sent; };
  Caller client(server.serving.port());

  // A request that waits meanwhile fails too: the peer is not trusted after a lie.
  const std::uint64_t ping = client.rpc.next_id();
  auto waiting = client.rpc.request(client.connection, ping, protocol::Ping{ping});
  // An honest answer first (the same connection, the same RpcClient): lands whole.
  server.honest_next = true;
  Landing honest(lie.asked);
  auto first = get_into(client, honest);
  ASSERT_NO_THROW(client.rpc.await(first, "get"));
  EXPECT_EQ(honest.first_touched(), Landing::guard);
  EXPECT_EQ(honest.memory[Landing::guard + lie.asked], std::byte{0x5a}) << "written past the reply";

  Landing landing(lie.asked);
  auto reply = get_into(client, landing);
  try {
    client.rpc.await(reply, "get");
    ADD_FAILURE() << lie.name << ": the request succeeded";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("test-peer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(lie.says), std::string::npos) << e.what();
  }
  EXPECT_EQ(landing.first_touched(), std::string::npos)
      << lie.name << ": byte " << landing.first_touched() << " of the destination and its guards was written";
  try {
    client.rpc.await(waiting, "ping");
    ADD_FAILURE() << lie.name << ": a request waiting on the lying peer survived";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find(lie.says), std::string::npos) << e.what();
  }
  // The payload nobody took was let go (a rendezvous one released to its
  // sender, whose send completes), and the connection carries on: the caller,
  // not the transport, decides to drop the peer.
  server.honest_next = true;
  Landing after(lie.asked);
  auto again = get_into(client, after);
  ASSERT_NO_THROW(client.rpc.await(again, "get")) << lie.name;
  EXPECT_EQ(after.first_touched(), Landing::guard);
  for (int i = 0; i < 1000 && server.sends_done.load() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.sends_done.load(), 3) << lie.name << ": the lying reply's send never completed";
}

INSTANTIATE_TEST_SUITE_P(
    Replies, RpcClientLies,
    ::testing::Values(Lie{"more", Lying::Reply::data, 4096, 4096 + (64 << 10), "sent 69632 bytes for a get of 4096"},
                      Lie{"fewer", Lying::Reply::data, 4096, 100, "sent 100 bytes for a get of 4096"},
                      Lie{"none", Lying::Reply::data, 4096, 0, "sent 0 bytes for a get of 4096"},
                      Lie{"more_by_rendezvous", Lying::Reply::data, 256 << 10, (256 << 10) + 1,
                          "sent 262145 bytes for a get of 262144"},
                      Lie{"refused_with_payload", Lying::Reply::refused_data, 4096, 4096,
                          "sent 4096 bytes with a data reply of status unknown_buffer"},
                      Lie{"pong_with_payload", Lying::Reply::pong, 4096, 4096,
                          "sent 4096 bytes with a pong for a get of 4096"}),
    [](const ::testing::TestParamInfo<Lie>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ferry::transport
