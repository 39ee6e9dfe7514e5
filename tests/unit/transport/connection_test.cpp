// Connections over real UCX on loopback: order, batching, thread safety,
// closes and dead peers seen as errors (again over TCP alone: tcp.Connection.*).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <iostream>

#include "ferry/error.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(Connection, HeaderOnlyMessagesEcho) {
  Server server;
  Client client(server.listener->port());
  EXPECT_EQ(client.connection->peer(), "127.0.0.1:" + std::to_string(server.listener->port()));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hello " + std::to_string(i)), nullptr, 0), "");
  }
  auto got = client.inbox.wait(3);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].header, "hello " + std::to_string(i));
    EXPECT_TRUE(got[i].payload.empty());
  }
  auto server_side = server.connection(0);
  ASSERT_TRUE(server_side);
  EXPECT_EQ(server_side->peer().rfind("127.0.0.1:", 0), 0u) << server_side->peer();
  EXPECT_EQ(server.errors.size(), 0u);
  EXPECT_EQ(client.errors.size(), 0u);
}

TEST(Connection, ManyMessagesInFlightArriveInOrder) {
  // Arrival order is what on_message sees; payloads land later (rendezvous
  // ones last), so the completed messages are checked apart from the order.
  Inbox<std::string> arrivals;
  Inbox<Message> received;
  auto complete = collect(received);
  Server server([&arrivals, complete](Connection& connection, Incoming& in) {
    arrivals.push(bytes_text(in.header()));
    complete(connection, in);
  });
  Client client(server.listener->port());
  constexpr int count = 2000;
  // Every 50th message is large enough for rendezvous; the rest are eager.
  auto big = random_bytes(512 << 10, 7);
  auto small = random_bytes(100, 8);
  Inbox<std::string> sent;
  for (int i = 0; i < count; ++i) {
    const auto& payload = i % 50 == 0 ? big : small;
    client.connection->send(text_bytes(std::to_string(i)), payload.data(), i % 3 == 0 ? 0 : payload.size(),
                            [&sent](const std::string& error) { sent.push(error); });
  }
  auto order = arrivals.wait(count, 30s);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(count));
  if (client.lane == protocol::Lane::bulk) {
    // Where no shared memory is (UCX_TLS=tcp): messages with a payload keep
    // their order among themselves, the rest among themselves.
    int last[2] = {-1, -1};
    for (const auto& arrived : order) {
      const int i = std::stoi(arrived);
      auto& before = last[i % 3 == 0 ? 0 : 1];
      ASSERT_GT(i, before) << "message " << i << " arrived after " << before << " on its lane";
      before = i;
    }
  } else {
    for (int i = 0; i < count; ++i) ASSERT_EQ(order[i], std::to_string(i)) << "out of order at " << i;
  }
  auto messages = received.wait(count, 30s);
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(count));
  for (auto& m : messages) {
    int i = std::stoi(m.header);
    const auto& payload = i % 50 == 0 ? big : small;
    ASSERT_EQ(m.error, "");
    ASSERT_EQ(m.payload.size(), i % 3 == 0 ? 0 : payload.size());
    ASSERT_TRUE(i % 3 == 0 || m.payload == payload) << "payload of message " << i;
  }
  auto results = sent.wait(count);
  ASSERT_EQ(results.size(), static_cast<std::size_t>(count));
  for (auto& error : results) ASSERT_EQ(error, "");
}

// One client's messages to a collecting server, sent in a burst, and what
// each send reported: the batching tests' set-up and their common checks.
struct Burst {
  Inbox<Message> received;
  Server server{collect(received)};
  // Over TCP, as between hosts: on a shared-memory lane a send is a store,
  // and send_soon does not gather.
  Client client{server.listener->port(), nullptr, /*shared_memory_lane=*/false};
  Inbox<std::string> sent;
  const std::uint64_t batched_before = client.worker->batched_messages();

  std::function<void(const std::string&)> done() {
    return [this](const std::string& error) { sent.push(error); };
  }
  // Every message arrived with the payload `payload_of(i)` says, and every
  // send reported success. In order among those with a payload and among
  // those without: over TCP the two travel on endpoints of their own (bulk
  // lanes), and either may overtake the other.
  void expect_arrived(int count, const std::function<std::string(int)>& header,
                      const std::function<const Bytes*(int)>& payload_of) {
    auto messages = received.wait(count, 30s);
    ASSERT_EQ(messages.size(), static_cast<std::size_t>(count));
    std::vector<int> expected[2];
    for (int i = 0; i < count; ++i) expected[payload_of(i) != nullptr].push_back(i);
    std::size_t next[2] = {0, 0};
    for (std::size_t m = 0; m < messages.size(); ++m) {
      const bool bulk = !messages[m].payload.empty();
      ASSERT_LT(next[bulk], expected[bulk].size()) << "message " << m << " (" << messages[m].header << ") is extra";
      const int i = expected[bulk][next[bulk]++];
      ASSERT_EQ(messages[m].header, header(i)) << "out of order at " << i;
      const Bytes* payload = payload_of(i);
      ASSERT_EQ(messages[m].payload.size(), bulk ? payload->size() : 0u) << "message " << i;
      if (bulk) {
        ASSERT_TRUE(messages[m].payload == *payload) << "payload of message " << i;
      }
    }
    const auto results = sent.wait(count);
    ASSERT_EQ(results.size(), static_cast<std::size_t>(count));
    for (const auto& error : results) ASSERT_EQ(error, "");
    EXPECT_EQ(server.errors.size(), 0u);
  }
  std::uint64_t batched() const { return client.worker->batched_messages() - batched_before; }
};

// Header-only messages the progress thread sends while it works through
// its queue leave together, one AM for the lot (a burst of replies was a
// system call each); payload messages between them go as they come.
TEST(Connection, ABurstFromTheProgressThreadLeavesInBatchesInOrder) {
  Burst burst;
  constexpr int count = 300;
  const auto payload = random_bytes(100, 9);
  // Some headers are empty: a frame of length 0 is a message like the others.
  const auto header = [](int i) { return i % 50 == 7 ? std::string() : std::to_string(i); };
  burst.client.worker->call([&] {
    for (int i = 0; i < count; ++i)
      burst.client.connection->send(text_bytes(header(i)), payload.data(), i % 37 == 0 ? payload.size() : 0,
                                    burst.done());
    return 0;
  });
  burst.expect_arrived(count, header, [&](int i) { return i % 37 == 0 ? &payload : nullptr; });
  EXPECT_GT(burst.batched(), static_cast<std::uint64_t>(count / 2)) << "the burst left one message at a time";
}

// send_soon: a message that may wait a moment for company. Mixed with
// send()s from another thread, everything arrives in order; the soon ones
// leave gathered; one alone still leaves once its cork runs out.
TEST(Connection, SendSoonMessagesLeaveTogetherInOrderAndAloneStillLeave) {
  Burst burst;
  auto& connection = *burst.client.connection;
  constexpr int count = 200;
  const auto payload = random_bytes(1000, 4);
  for (int i = 0; i < count; ++i) {
    if (i % 25 == 24) connection.send(text_bytes(std::to_string(i)), payload.data(), payload.size(), burst.done());
    else if (i % 25 == 12) connection.send(text_bytes(std::to_string(i)), nullptr, 0, burst.done());
    else connection.send_soon(text_bytes(std::to_string(i)), burst.done());
  }
  burst.expect_arrived(count, [](int i) { return std::to_string(i); },
                       [&](int i) { return i % 25 == 24 ? &payload : nullptr; });
  // Over RDMA a send is no system call, and send_soon does not gather.
  const std::string transports = ", " + burst.client.worker->transports();
  if (transports.find(", rc") == std::string::npos && transports.find(", ud") == std::string::npos &&
      transports.find(", dc") == std::string::npos) {
    EXPECT_GT(burst.batched(), static_cast<std::uint64_t>(count / 2)) << "the soon messages left one at a time";
  }

  // Alone, from this thread and from the progress thread: nothing else
  // comes to take it along, so only its cork running out sends it.
  connection.send_soon(text_bytes("alone"));
  auto all = burst.received.wait(count + 1, 10s);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(count + 1)) << "a lone send_soon message never left";
  EXPECT_EQ(all.back().header, "alone");
  burst.client.worker->call([&] {
    connection.send_soon(text_bytes("alone, from the progress thread"));
    return 0;
  });
  all = burst.received.wait(count + 2, 10s);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(count + 2))
      << "a lone send_soon message from the progress thread never left";
  EXPECT_EQ(all.back().header, "alone, from the progress thread");
}

TEST(Connection, SendIsThreadSafe) {
  Inbox<Message> received;
  Server server(collect(received));
  Client client(server.listener->port());
  constexpr int threads = 4, per_thread = 250;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i)
        client.connection->send(text_bytes(std::to_string(t) + ":" + std::to_string(i)));
    });
  }
  for (auto& sender : senders) sender.join();
  auto messages = received.wait(threads * per_thread);
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(threads * per_thread));
  std::vector<int> next(threads, 0);  // each thread's own sends stay in order
  for (auto& m : messages) {
    auto colon = m.header.find(':');
    int t = std::stoi(m.header.substr(0, colon));
    ASSERT_EQ(std::stoi(m.header.substr(colon + 1)), next[t]++);
  }
}

TEST(Connection, TwoClientsAtOnce) {
  Server server;
  Client a(server.listener->port());
  Client b(server.listener->port());
  auto payload_a = random_bytes(3 << 20, 1);
  auto payload_b = random_bytes(5000, 2);
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i)
      a.connection->send(text_bytes("a" + std::to_string(i)), payload_a.data(), payload_a.size(), {});
  });
  std::thread tb([&] {
    for (int i = 0; i < 20; ++i)
      b.connection->send(text_bytes("b" + std::to_string(i)), payload_b.data(), payload_b.size(), {});
  });
  ta.join();
  tb.join();
  auto got_a = a.inbox.wait(20, 30s);
  auto got_b = b.inbox.wait(20, 30s);
  ASSERT_EQ(got_a.size(), 20u);
  ASSERT_EQ(got_b.size(), 20u);
  for (auto& m : got_a) EXPECT_TRUE(m.header[0] == 'a' && m.payload == payload_a) << m.header;
  for (auto& m : got_b) EXPECT_TRUE(m.header[0] == 'b' && m.payload == payload_b) << m.header;
  ASSERT_TRUE(server.connection(1));
  EXPECT_NE(server.connection(0)->peer(), server.connection(1)->peer());
}

std::uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(Connection, ConnectingToNobodyThrowsNamingTheAddress) {
  auto worker = Worker::create();
  auto port = unused_port();
  auto start = std::chrono::steady_clock::now();
  try {
    connect(worker, port, {}, {});
    FAIL() << "connected to a port nobody listens on";
  } catch (const UcxError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
    EXPECT_NE(e.status(), 0);
    std::cout << "  UcxError: " << e.what() << "\n";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // The worker is still fine afterwards.
  Server server;
  Client client(server.listener->port(), worker);
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("after"), nullptr, 0), "");
}

TEST(Connection, ServerSeesClientCloseAsError) {
  Server server;
  Client client(server.listener->port());
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  ASSERT_TRUE(server.connection(0));
  client.connection->close();
  client.connection->close();  // idempotent
  EXPECT_TRUE(client.connection->closed());
  auto errors = server.errors.wait(1);
  ASSERT_EQ(errors.size(), 1u) << "the server did not notice the client closing";
  EXPECT_TRUE(server.connection(0)->closed());
  EXPECT_EQ(client.errors.size(), 0u) << "a local close is not an error";
  // Sending on a closed connection reports an error instead of vanishing.
  EXPECT_NE(send_and_wait(*client.connection, text_bytes("late"), nullptr, 0), "");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(server.errors.size(), 1u) << "on_error is called once";
}

TEST(Connection, MessagesSentBeforeCloseArriveBeforeTheError) {
  Inbox<Message> received;
  Server server(collect(received));
  Client client(server.listener->port());
  constexpr int count = 100;
  auto payload = random_bytes(100 << 10, 3);
  for (int i = 0; i < count; ++i)
    client.connection->send(text_bytes(std::to_string(i)), payload.data(), i % 2 ? payload.size() : 10, {});
  client.connection->close();
  EXPECT_EQ(server.errors.wait(1).size(), 1u);
  EXPECT_EQ(received.wait(count, 1s).size(), static_cast<std::size_t>(count));
}

TEST(Connection, ClientSeesServerCloseAsError) {
  Server server;
  Client client(server.listener->port());
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  ASSERT_TRUE(server.connection(0));
  server.connection(0)->close();
  auto errors = client.errors.wait(1);
  ASSERT_EQ(errors.size(), 1u) << "the client did not notice the server closing";
  EXPECT_NE(errors[0].find("127.0.0.1:"), std::string::npos) << errors[0];
  EXPECT_TRUE(client.connection->closed());
  EXPECT_NE(send_and_wait(*client.connection, text_bytes("late"), nullptr, 0), "");
}

TEST(Connection, DestroyingTheClientWorkerAndConnectionIsSeenByTheServer) {
  Server server;
  {
    Client client(server.listener->port());
    EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  }
  EXPECT_EQ(server.errors.wait(1).size(), 1u);
}

// A client whose process goes on but whose connection and worker end in
// the middle of a burst (the killed one is ClientKilledMidBurst...).
// Takes every payload into a buffer of its own: a receive whose sender died
// mid-rendezvous never completes (UCX 1.13), and its callback then runs at
// the worker's shutdown, after the test's locals are gone.
void take_payload(Connection&, Incoming& in) {
  if (in.payload_bytes() == 0) return;
  auto buffer = std::make_shared<Bytes>(in.payload_bytes());
  in.into(buffer->data(), [buffer](const std::string&) {});
}

TEST(Connection, AClientGoneWithPayloadsInFlightLeavesTheServerServing) {
  Server server(take_payload);
  auto big = random_bytes(512 << 10, 7);
  auto small = random_bytes(100, 8);
  for (int round = 0; round < 3; ++round) {
    Client client(server.listener->port());
    for (int i = 0; i < 500; ++i) {
      const auto& payload = i % 50 == 0 ? big : small;
      client.connection->send(text_bytes(std::to_string(i)), payload.data(), i % 3 == 0 ? 0 : payload.size(), {});
    }
  }  // closed and its worker destroyed with sends still in flight
  EXPECT_EQ(server.errors.wait(3).size(), 3u) << "the server did not see every client close";
  Client last(server.listener->port());
  EXPECT_EQ(send_and_wait(*last.connection, text_bytes("still serving"), nullptr, 0), "");
}

TEST(Connection, HeaderBeyondUcxLimitIsReported) {
  Server server;
  Client client(server.listener->port());
  auto error = send_and_wait(*client.connection, Bytes(1 << 20), nullptr, 0);
  EXPECT_NE(error.find("exceeds"), std::string::npos) << error;
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("still fine"), nullptr, 0), "");
}

// The last references to a Connection and its Worker can go on the progress
// thread itself (here: a server dropping a connection from its error handler).
TEST(Connection, LastReferenceDroppedOnTheProgressThread) {
  auto worker = Worker::create({"server"});
  auto holder = std::make_shared<std::shared_ptr<Connection>>();
  Inbox<int> dropped;
  auto listener = listen(worker, [holder, &dropped](std::shared_ptr<Connection> c) {
    c->set_handlers({}, [holder, &dropped](Connection&, const std::string&) {
      holder->reset();
      dropped.push(1);
    });
    *holder = std::move(c);
  });
  Client client(listener->port());
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  listener.reset();
  worker.reset();  // the accepted connection holds the worker now
  client.connection->close();
  EXPECT_EQ(dropped.wait(1).size(), 1u);
  std::this_thread::sleep_for(200ms);  // let the detached thread finish tearing down
}

// PeerProcessDeathIsSeenAsError runs this binary again as a client that
// connects and dies without closing anything, as a crashed client would;
// that happens here, before main(), so it is no test of its own.
const bool doomed_client = [] {
  const char* port = std::getenv("FERRY_TEST_DOOMED_CLIENT_PORT");
  if (port == nullptr) return false;
  Client client(static_cast<std::uint16_t>(std::atoi(port)));
  // Waits for the echo: a send's completion is local, so a message sent just
  // before dying may never reach the server.
  client.connection->send(text_bytes("about to die"));
  if (client.inbox.wait(1).size() == 1) std::raise(SIGKILL);
  std::_Exit(3);
}();

// Another, spawned by ClientKilledMidBurstLeavesTheServerServing: connects,
// starts a burst of messages with payloads (on the bulk lane over TCP) and
// dies in the middle of it.
const bool bursting_client = [] {
  const char* port = std::getenv("FERRY_TEST_BURSTING_CLIENT_PORT");
  if (port == nullptr) return false;
  Client client(static_cast<std::uint16_t>(std::atoi(port)));
  auto payload = random_bytes(300 << 10, 5);
  for (int i = 0; i < 200; ++i)
    client.connection->send(text_bytes(std::to_string(i)), payload.data(), i % 2 ? payload.size() : 100, {});
  std::raise(SIGKILL);
  std::_Exit(3);
}();

TEST(Connection, ClientKilledMidBurstLeavesTheServerServing) {
  Server server(take_payload);
  auto port = std::to_string(server.listener->port());
  std::string exe = "/proc/self/exe";
  std::vector<char*> argv = {exe.data(), nullptr};
  auto env = "FERRY_TEST_BURSTING_CLIENT_PORT=" + port;
  // The child takes this process's transports (UCX_TLS=tcp under the tcp. prefix).
  std::string tls = std::string("UCX_TLS=") + (std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "all");
  std::vector<char*> envp = {env.data(), tls.data(), nullptr};
  constexpr int clients = 5;
  for (int round = 0; round < clients; ++round) {
    pid_t child = 0;
    ASSERT_EQ(posix_spawn(&child, argv[0], nullptr, nullptr, argv.data(), envp.data()), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "a bursting client did not get to die";
  }
  EXPECT_EQ(server.errors.wait(clients).size(), static_cast<std::size_t>(clients))
      << "the server did not notice every client dying";
  Client last(server.listener->port());
  EXPECT_EQ(send_and_wait(*last.connection, text_bytes("still serving"), nullptr, 0), "");
}

TEST(Connection, PeerProcessDeathIsSeenAsError) {
  Server server;
  auto port = std::to_string(server.listener->port());
  std::string exe = "/proc/self/exe";
  std::vector<char*> argv = {exe.data(), nullptr};
  auto env = "FERRY_TEST_DOOMED_CLIENT_PORT=" + port;
  std::vector<char*> envp = {env.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, argv[0], nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child did not get its echo";
  auto errors = server.errors.wait(1);
  ASSERT_EQ(errors.size(), 1u) << "the server did not notice the client process dying";
  std::cout << "  " << errors[0] << "\n";
  EXPECT_TRUE(server.connection(0)->closed());
  EXPECT_NE(send_and_wait(*server.connection(0), text_bytes("anyone?"), nullptr, 0), "");
}

}  // namespace
}  // namespace ferry::transport
