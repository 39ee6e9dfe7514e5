// The bootstrap listener: a taken port, and a stop from its own accept handler.
#include <gtest/gtest.h>

#include <dirent.h>

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

int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// A dial that a host refuses (it is down: nothing listens on its port)
// leaves no socket behind: a runtime redials a lost host every few seconds
// for as long as it is gone (the soak saw one more open fd per refused dial).
TEST(Bootstrap, ARefusedDialLeavesNoSocketOpen) {
  auto worker = Worker::create({"client"});
  std::uint16_t port = 0;
  {
    Server gone;
    port = gone.listener->port();
  }  // nothing listens there now
  const int before = open_fds();
  for (int i = 0; i < 10; ++i)
    EXPECT_THROW(dial(worker, "127.0.0.1", port, DialOptions{}, nullptr, nullptr), UcxError);
  EXPECT_EQ(open_fds(), before);
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
