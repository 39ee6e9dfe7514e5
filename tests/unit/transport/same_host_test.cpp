// Which process holds the other end of a loopback socket (same_host.hpp).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "same_host.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

// The check a pid claimed in the handshake must pass: the process holds
// the other end of the bootstrap socket. Here this process holds both.
TEST(SameHost, OnlyTheProcessHoldingThePeerSocketIsTheLoopbackPeer) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int dialer = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(dialer, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);

  EXPECT_TRUE(loopback_peer_is_process(dialer, ::getpid()));
  EXPECT_TRUE(loopback_peer_is_process(accepted, ::getpid()));
  EXPECT_FALSE(loopback_peer_is_process(dialer, ::getppid()));  // a process that does not hold it
  EXPECT_FALSE(loopback_peer_is_process(dialer, 0));
  EXPECT_FALSE(loopback_peer_is_process(dialer, -1));
  // A child holds the socket too once forked, but not after it closed its copy.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(accepted);
    ::pause();
    ::_exit(0);
  }
  bool closed_in_child = false;
  for (int i = 0; i < 200 && !closed_in_child; ++i) {
    closed_in_child = !loopback_peer_is_process(dialer, child);
    if (!closed_in_child) std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(closed_in_child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  for (int fd : {dialer, accepted, listener}) ::close(fd);
}

}  // namespace
}  // namespace ferry::transport
