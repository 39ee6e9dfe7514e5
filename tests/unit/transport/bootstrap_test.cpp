// The bootstrap listener: a taken port, and a stop from its own accept handler.
#include <gtest/gtest.h>

#include <atomic>

#include "ferry/error.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(Bootstrap, TakenPortThrowsNamingTheAddress) {
  Server server;
  auto port = server.listener->port();
  ASSERT_NE(port, 0);
  try {
    listen(server.worker, {}, port);
    FAIL() << "listened twice on port " << port;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

TEST(Bootstrap, StopFromTheAcceptHandlerStopsAccepting) {
  auto worker = Worker::create({"server"});
  std::vector<std::shared_ptr<Connection>> accepted;  // progress thread only, until the listener is gone
  BootstrapServer* self = nullptr;
  auto listener = listen(worker, [&](std::shared_ptr<Connection> c) {
    accepted.push_back(std::move(c));
    self->stop();
  });
  self = listener.get();
  auto port = listener->port();
  Client first(port);
  EXPECT_EQ(send_and_wait(*first.connection, text_bytes("hi"), nullptr, 0), "");
  EXPECT_THROW(Client second(port), UcxError);
  listener->stop();  // idempotent
  worker->call([&] { accepted.clear(); });
}

}  // namespace
}  // namespace ferry::transport
