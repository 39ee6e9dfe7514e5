// A ferryd on this host, run by this user, talks to its clients over a
// shared-memory lane (UCX's sysv/posix FIFOs rather than TCP on loopback),
// and kill -9 at either end in the middle of bulk transfers still ends only
// that end's work: ferryd keeps serving, a client's tasks fail over. Without
// the lane (FERRY_SHARED_MEMORY=0) it talks TCP on loopback with bulk lanes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "../support/scoped_env.hpp"
#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"

namespace {

using ferry::test::FerrydProcess;
using namespace std::chrono_literals;

using ferry::test::ScopedEnv;

// Still running, and not reaped here (FerrydProcess reaps it at the end).
bool running(const FerrydProcess& server) {
  siginfo_t info{};
  return server.pid() > 0 && ::waitid(P_PID, static_cast<id_t>(server.pid()), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

ferry::Runtime::Options options_for(const FerrydProcess& server) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // a test that wants a GPU asks for one
  o.auto_chunk = false;
  o.remotes = {server.address()};
  o.token_file = server.token_file();
  return o;
}

// The lane needs UCX's shared-memory transports; a UCX_TLS that leaves them
// out (the CI runner's or a user's) is a choice this test cannot override.
std::optional<std::string> lane_impossible() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr) return std::nullopt;
  const std::string text(tls);
  if (text.find("sysv") == std::string::npos && text.find("posix") == std::string::npos && text.find("sm") == std::string::npos)
    return "UCX_TLS=" + text + " leaves out shared memory";
  if (text.find("cma") != std::string::npos) return "UCX_TLS=" + text + " names CMA, which rules the lane out";
  return std::nullopt;
}

// Ships n floats to the remote, doubles them there, and checks them at home.
void double_there_and_check(ferry::Runtime& rt, std::size_t n) {
  auto x = rt.buffer<float>(n);
  {
    auto h = x.host();
    for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 97);
  }
  rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote())).wait();
  auto h = x.host_read();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], 2.0f * static_cast<float>(i % 97)) << "element " << i;
}

TEST(SharedMemoryLane, SameHostFerrydCarriesMessagesOverSharedMemory) {
  if (auto why = lane_impossible()) GTEST_SKIP() << *why;
  // ferryd's UCX logs each endpoint's transports to a file of its own, read
  // once ferryd has stopped (UCX buffers it).
  const auto ucx_log = std::filesystem::temp_directory_path() / ("ferry-lane-ucx-" + std::to_string(::getpid()) + ".log");
  std::optional<FerrydProcess> server;
  {
    ScopedEnv level("UCX_LOG_LEVEL", "info");
    ScopedEnv file("UCX_LOG_FILE", ucx_log.c_str());
    server.emplace();
  }
  {
    ferry::Runtime rt(options_for(*server));
    double_there_and_check(rt, std::size_t{16} << 20);  // 64 MiB: rendezvous, in chunks
    double_there_and_check(rt, 1000);                   // eager
    EXPECT_TRUE(server->wait_for_log("shared-memory lane")) << server->log();
  }
  EXPECT_EQ(server->stop(SIGTERM), 0) << server->log();
  std::ifstream in(ucx_log);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(ucx_log);
  // UCX's line for the lane's configuration: messages on shared memory.
  EXPECT_TRUE(log.find("am(sysv/memory") != std::string::npos || log.find("am(posix/memory") != std::string::npos)
      << "UCX's endpoint configurations in ferryd:\n" << log;
  // And the control endpoint's: on TCP, where the client's death is
  // noticed as its socket closes (on shared memory only at UCX's keepalive).
  EXPECT_NE(log.find("am(tcp/"), std::string::npos) << "UCX's endpoint configurations in ferryd:\n" << log;
}

// On the lane, large payloads are pulled out of the sender's memory
// (process_vm_readv) rather than sent through UCX: both ways once each end
// read the other's probe, and not at all when the client says
// FERRY_PULL_PAYLOADS=0. Both ends run with the same Yama setting, so a
// host whose ptrace_scope forbids the reads skips rather than fails.
bool ptrace_restricted() {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  return in >> scope && scope > 0 && ::geteuid() != 0;
}

TEST(SharedMemoryLane, SameHostFerrydPullsPayloadsBothWays) {
  if (auto why = lane_impossible()) GTEST_SKIP() << *why;
  if (ptrace_restricted()) GTEST_SKIP() << "kernel.yama.ptrace_scope forbids process_vm_readv between these processes";
  std::optional<FerrydProcess> server;
  {
    ScopedEnv level("FERRY_LOG", "debug");  // the pull decisions are debug lines
    server.emplace();
  }
  {
    ferry::Runtime rt(options_for(*server));
    double_there_and_check(rt, std::size_t{16} << 20 | 5);  // 64 MiB and 20 bytes: chunks, one uneven
    double_there_and_check(rt, 1000);                       // below the pull threshold: sent
  }
  EXPECT_TRUE(server->wait_for_log("this end pulls")) << server->log();
  EXPECT_TRUE(server->wait_for_log("pulls this end's payloads")) << server->log();
}

TEST(SharedMemoryLane, FerryPullPayloadsZeroAtTheClientSendsEverything) {
  if (auto why = lane_impossible()) GTEST_SKIP() << *why;
  std::optional<FerrydProcess> server;
  {
    ScopedEnv level("FERRY_LOG", "debug");
    server.emplace();
  }
  ScopedEnv off("FERRY_PULL_PAYLOADS", "0");  // read by this client only: ferryd started without it
  {
    ferry::Runtime rt(options_for(*server));
    double_there_and_check(rt, std::size_t{4} << 20);
  }
  EXPECT_TRUE(server->wait_for_log("shared-memory lane")) << server->log();
  EXPECT_EQ(server->log().find("this end pulls"), std::string::npos) << server->log();
  EXPECT_EQ(server->log().find("pulls this end's payloads"), std::string::npos) << server->log();
}

// Without the shared-memory lane the client offers bulk lanes: each end's
// payloads on an endpoint of their own, beside the control endpoint.
TEST(SharedMemoryLane, FerrySharedMemoryZeroKeepsLoopbackTcpWithBulkLanes) {
  ScopedEnv off("FERRY_SHARED_MEMORY", "0");  // read by this client when it dials
  FerrydProcess server;
  ferry::Runtime rt(options_for(server));
  double_there_and_check(rt, std::size_t{16} << 20);  // rendezvous both ways, in chunks
  double_there_and_check(rt, 100000);
  EXPECT_TRUE(server.wait_for_log("authenticated (")) << server.log();
  EXPECT_EQ(server.log().find("shared-memory lane"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("bulk lanes"), std::string::npos) << server.log();
}

TEST(SharedMemoryLane, FerryBulkLanesZeroKeepsOneEndpoint) {
  ScopedEnv off("FERRY_SHARED_MEMORY", "0");
  ScopedEnv one("FERRY_BULK_LANES", "0");
  FerrydProcess server;
  ferry::Runtime rt(options_for(server));
  double_there_and_check(rt, std::size_t{4} << 20);
  EXPECT_TRUE(server.wait_for_log("authenticated (")) << server.log();
  EXPECT_EQ(server.log().find("bulk lanes"), std::string::npos) << server.log();
}

// A client killed mid-transfer must not take ferryd with it: the lane has
// no UCX error handling, which is why CMA stays out (UCX aborts the
// process when CMA meets a dead peer there).
void kill_clients_mid_transfer();

TEST(SharedMemoryLane, ClientKilledMidTransferLeavesFerrydServing) {
  if (auto why = lane_impossible()) GTEST_SKIP() << *why;
  kill_clients_mid_transfer();
}

// The same over loopback TCP with bulk lanes: ferryd's receives of the dead
// client's payloads never complete, and UCX 1.13 ends some from inside the
// call that started them.
TEST(SharedMemoryLane, ClientKilledMidTransferOnBulkLanesLeavesFerrydServing) {
  ScopedEnv off("FERRY_SHARED_MEMORY", "0");  // the forked clients dial with it
  kill_clients_mid_transfer();
}

void kill_clients_mid_transfer() {
  FerrydProcess server;
  for (int round = 0; round < 3; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // ships 64 MiB again and again until killed
      try {
        ferry::Runtime rt(options_for(server));
        auto x = rt.buffer<float>(std::size_t{16} << 20);
        for (;;) {
          (void)x.host();  // the remote copy goes stale: the next task ships all of x
          rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::remote())).wait();
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    // Long enough to be mid-transfer whatever the round (the first ship starts within ~100 ms).
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + 250 * round));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the client ended by itself (status " << status << ") before it was killed";
    ASSERT_TRUE(running(server)) << "ferryd died with its client\n" << server.log();
  }
  {
    ferry::Runtime rt(options_for(server));
    double_there_and_check(rt, std::size_t{4} << 20);
    EXPECT_GE(rt.remote_stats(server.address()).bytes_shipped, std::size_t{16} << 20);
  }
  EXPECT_TRUE(running(server)) << server.log();
  // What the dead clients left in flight must not crash its shutdown either.
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

// ferryd killed mid-transfer: the client notices on the control endpoint,
// and its tasks finish on the CPU with the right values.
void kill_ferryd_mid_transfer();

TEST(SharedMemoryLane, FerrydKilledMidTransferIsNoticedAndTasksFailOver) {
  if (auto why = lane_impossible()) GTEST_SKIP() << *why;
  kill_ferryd_mid_transfer();
}

// The same over loopback TCP with bulk lanes: the kill lands in a payload
// on a bulk lane, and the client still notices it and fails over.
TEST(SharedMemoryLane, FerrydKilledMidTransferOnBulkLanesIsNoticedAndTasksFailOver) {
  ScopedEnv off("FERRY_SHARED_MEMORY", "0");
  kill_ferryd_mid_transfer();
}

void kill_ferryd_mid_transfer() {
  FerrydProcess server;
  auto options = options_for(server);
  // prefer: tasks pinned to the host keep being submitted after it is lost,
  // which require refuses (Remote.ReconnectsAndUsesTheHostAgain).
  options.remote_policy = ferry::RemotePolicy::prefer;
  ferry::Runtime rt(options);
  const std::size_t n = std::size_t{16} << 20;
  auto x = rt.buffer<float>(n);
  {
    auto h = x.host();
    for (std::size_t i = 0; i < n; ++i) h[i] = 1.0f;
  }
  std::vector<ferry::Task> tasks;
  for (int i = 0; i < 12; ++i) {
    (void)x.host();  // each task ships x again: the kill lands in a transfer
    tasks.push_back(rt.submit("scal", ferry::readwrite(x), 2.0, ferry::on(ferry::remote())));
    if (i == 3) server.stop(SIGKILL);
  }
  rt.wait();
  auto h = x.host_read();
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(h[i], 4096.0f) << "element " << i;
  const auto stats = rt.remote_stats(server.address());
  EXPECT_FALSE(stats.connected);
  EXPECT_NE(stats.down_reason, "");
}

}  // namespace
