// Chains forwarded to a real ferryd: a task whose predecessors were all sent
// to the same host goes out before they finish, and ferryd runs it behind
// them. Results, failures and a host killed mid-chain must come out exactly
// as if every task had waited for the one before.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <random>

#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"

namespace {

using ferry::test::FerrydProcess;

ferry::Runtime::Options options_for(FerrydProcess* server) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.gpus = "none";  // a test that wants a GPU asks for one
  o.read_environment = false;
  if (server != nullptr) {
    o.remotes = {server->address()};
    o.token_file = server->token_file();
  }
  return o;
}

// A readwrite chain of n tasks on y (alternating axpy from x and scal),
// placed where `where` says; returns y.
std::vector<double> run_chain(ferry::Runtime& rt, int n, const ferry::OnOption& where) {
  const std::size_t size = 3000;  // not a power of two: the kernels' tails run too
  auto x = rt.buffer<double>(size), y = rt.buffer<double>(size);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& v : x.host()) v = u(rng);
  for (auto& v : y.host()) v = u(rng);
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 0.25 + i * 1e-3, where);
    else rt.submit("scal", ferry::readwrite(y), 0.999, where);
  }
  rt.wait();
  auto h = y.host();
  return {h.begin(), h.end()};
}

TEST(RemoteChain, ChainsGiveTheCpusResults) {
  FerrydProcess server;
  ferry::Runtime cpu(options_for(nullptr));
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  for (int n : {1, 2, 1000}) {
    const std::uint64_t forwarded_before = rt.remote_stats(server.address()).tasks_forwarded;
    const auto expected = run_chain(cpu, n, ferry::on(ferry::cpu()));
    const auto got = run_chain(rt, n, remote);
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "chain of " << n << ", element " << i;
    if (n == 1000) {
      EXPECT_GT(rt.remote_stats(server.address()).tasks_forwarded, forwarded_before)
          << "no task of the chain was forwarded";
    }
  }
}

// Sealed, forwards and replies leave gathered (send_soon) and each is still
// opened on its own: the same results, and a wait still returns.
TEST(RemoteChain, ASealedChainGivesTheCpusResults) {
  FerrydProcess server;
  ferry::Runtime cpu(options_for(nullptr));
  auto o = options_for(&server);
  o.encrypt_loopback = true;
  ferry::Runtime rt(o);
  ASSERT_TRUE(server.wait_for_log("authenticated (")) << server.log();
  ASSERT_EQ(server.log().find("authenticated (plaintext"), std::string::npos) << "the link is not sealed: " << server.log();
  const auto remote = ferry::on(ferry::remote(server.address()));
  for (int n : {2, 500}) {
    const auto expected = run_chain(cpu, n, ferry::on(ferry::cpu()));
    const auto got = run_chain(rt, n, remote);
    ASSERT_EQ(got, expected) << "chain of " << n;
  }
  EXPECT_GT(rt.remote_stats(server.address()).tasks_forwarded, 0u) << "no task of the chains was forwarded";
}

TEST(RemoteChain, MiddleFailureStopsReadersAndLetsWritersRun) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  auto a = rt.buffer<double>(32, 32), b = rt.buffer<double>(1000);
  std::vector<ferry::Task> tasks;
  tasks.push_back(rt.submit("fill", ferry::write(a), -1.0, remote));  // not positive definite
  tasks.push_back(rt.submit("fill", ferry::write(b), 1.0, remote));
  tasks.push_back(rt.submit("potrf", ferry::readwrite(a), remote));    // fails
  tasks.push_back(rt.submit("scal", ferry::readwrite(a), 2.0, remote));  // reads what failed: stops
  tasks.push_back(rt.submit("scal", ferry::readwrite(b), 2.0, remote));  // independent: runs
  tasks.push_back(rt.submit("fill", ferry::write(a), 3.0, remote));    // overwrites: runs
  tasks.push_back(rt.submit("scal", ferry::readwrite(a), 2.0, remote));  // reads the good data: runs
  EXPECT_NO_THROW(tasks[0].wait());
  EXPECT_THROW(tasks[2].wait(), ferry::KernelError);
  try {
    tasks[3].wait();
    ADD_FAILURE() << "the reader of the failed task ran";
  } catch (const ferry::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("did not run"), std::string::npos) << e.what();
  }
  for (int i : {4, 5, 6}) EXPECT_NO_THROW(tasks[i].wait()) << "task " << i;
  EXPECT_THROW(rt.wait(), ferry::KernelError);
  for (double v : a.host()) ASSERT_EQ(v, 6.0);
  for (double v : b.host()) ASSERT_EQ(v, 2.0);
  // The remote still serves: the failure spoiled nothing that was rewritten.
  EXPECT_EQ(rt.submit("sum", ferry::read(a), remote).result(), 6.0 * 32 * 32);
}

TEST(RemoteChain, KillNineMidForwardedChainStillFinishesCorrectly) {
  FerrydProcess server;
  auto options = options_for(&server);
  // prefer: tasks pinned to the host keep being submitted after it is lost,
  // which require refuses (Remote.ReconnectsAndUsesTheHostAgain).
  options.remote_policy = ferry::RemotePolicy::prefer;
  ferry::Runtime rt(options);
  const auto remote = ferry::on(ferry::remote(server.address()));
  const std::size_t n = 1 << 12;
  auto x = rt.buffer<double>(n), y = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  std::vector<ferry::Task> tasks;
  for (int i = 0; i < 600; ++i) {
    tasks.push_back(rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, remote));
    if (i == 300) {
      tasks[100].wait();
      server.stop(SIGKILL);
    }
  }
  rt.wait();
  int on_cpu = 0;
  for (auto& t : tasks) on_cpu += t.device() == "cpu";
  EXPECT_GT(on_cpu, 0) << "nothing was rescheduled";
  EXPECT_GT(rt.remote_stats(server.address()).tasks_forwarded, 0u) << "the chain was not forwarded";
  for (double v : y.host()) ASSERT_EQ(v, 600.0);
}

// A chain far longer than the lineage limit: the copy it writes comes home
// every few thousand tasks (each time with the chain's earlier runs all
// finished there), so the client's lineage stays bounded, and losing the
// host at the end replays only the tasks since the last checkpoint, from
// its data. The result is the CPU's either way.
TEST(RemoteChain, ALongChainsLineageIsCutByCheckpoints) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  const std::size_t n = 1000;
  auto x = rt.buffer<double>(n), y = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  std::ranges::fill(y.host(), 0.0);
  constexpr int tasks = 10000;  // the limit for a buffer this small is 4096 writes
  // The first task ships x and y and waits: the rest can all be forwarded
  // at their submission, however far the submitting thread runs ahead.
  rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, remote).wait();
  for (int i = 1; i < tasks; ++i) rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, remote);
  rt.wait();
  const auto stats = rt.remote_stats(server.address());
  EXPECT_GE(stats.lineage_checkpoints, 2u) << "a chain of " << tasks << " writes was never brought home";
  EXPECT_GT(stats.tasks_forwarded, static_cast<std::uint64_t>(tasks / 2)) << "checkpoints stopped the forwarding";
  server.stop(SIGKILL);
  for (double v : y.host()) ASSERT_EQ(v, static_cast<double>(tasks)) << "recomputed from the last checkpoint";
}

// A chain held back at its start (here by a host view of its buffer; a CPU
// task or the first task's own ship do the same): each task is held behind
// its predecessor, and once the first is sent all the others are forwarded
// behind it, however many there are (a send looks only at the tasks held
// behind it). Held tasks were capped at 1024, and every task past them ran
// one round trip at a time.
TEST(RemoteChain, AChainHeldAtItsStartIsForwardedWholeOnceItGoes) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  auto x = rt.buffer<double>(100), y = rt.buffer<double>(100);
  std::ranges::fill(x.host(), 1.0);
  std::ranges::fill(y.host(), 0.0);
  constexpr int tasks = 3000;
  {
    auto view = y.host();  // every writer of y waits until it goes
    for (int i = 0; i < tasks; ++i) rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 1.0, remote);
  }
  rt.wait();
  // The first ships y and goes when ready; every other one was forwarded.
  EXPECT_EQ(rt.remote_stats(server.address()).tasks_forwarded, static_cast<std::uint64_t>(tasks - 1));
  for (double v : y.host()) ASSERT_EQ(v, static_cast<double>(tasks));
}

long own_voluntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);  // every thread of this process
  return u.ru_nvcsw;
}

// Voluntary context switches per task of 400 submitted to the remote one
// at a time, each waited for by `wait` before the next; the results stay
// the CPU's.
template <typename Wait>
double switches_per_waited_task(Wait&& wait) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  auto y = rt.buffer<double>(1);
  y.host()[0] = 1.0;
  for (int i = 0; i < 50; ++i) rt.submit("scal", ferry::readwrite(y), 1.0, remote).wait();  // y lives there
  constexpr int tasks = 400;
  const long before = own_voluntary_switches();
  for (int i = 0; i < tasks; ++i) {
    auto t = rt.submit("scal", ferry::readwrite(y), i % 2 == 0 ? 2.0 : 0.5, remote);
    wait(t);
    EXPECT_EQ(t.device(), "remote:" + server.address()) << "task " << i << " did not run on the remote";
  }
  const double per_task = static_cast<double>(own_voluntary_switches() - before) / tasks;
  EXPECT_EQ(y.host()[0], 1.0);
  return per_task;
}

// Submit and wait, one task at a time: the waiting thread takes its
// forwarded task and waits for the reply itself, and no proxy wakes for it,
// so the whole client sleeps about twice per task (the progress thread for
// the reply, the waiter). It was nine: the proxy's two, and every idle
// proxy woken each time a job finished.
TEST(RemoteChain, ASubmitAndWaitWakesTheClientOnlyForTheReply) {
  const double per_task = switches_per_waited_task([](const ferry::Task& t) { t.wait(); });
  std::cout << "  context switches per submit+wait: " << per_task << "\n";
  EXPECT_LT(per_task, 5.0);
}

// The same with a bounded wait (Task::wait_for, which Python's result()
// uses, in slices, to answer Ctrl-C): the waiter takes its own reply too.
// It went through a continuation and a proxy: 4.5 switches a task, now 2.
TEST(RemoteChain, ABoundedWaitAlsoTakesItsOwnReply) {
  const double per_task =
      switches_per_waited_task([](const ferry::Task& t) { ASSERT_TRUE(t.wait_for(std::chrono::seconds(30))); });
  std::cout << "  context switches per submit+wait_for: " << per_task << "\n";
  EXPECT_LT(per_task, 3.5);
}

// A bounded wait that ends before the reply gives the task back: a proxy
// (or a later wait) finishes it, with the host's result.
TEST(RemoteChain, ABoundedWaitThatEndsFirstLeavesTheTaskToFinish) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(&server));
  const auto remote = ferry::on(ferry::remote(server.address()));
  const std::size_t n = 1024;
  auto a = rt.buffer<double>(n, n), b = rt.buffer<double>(n, n), c = rt.buffer<double>(n, n);
  std::ranges::fill(a.host(), 1.0);
  std::ranges::fill(b.host(), 1.0);
  std::ranges::fill(c.host(), 0.0);
  for (auto* m : {&a, &b, &c}) rt.submit("scal", ferry::readwrite(*m), 1.0, remote).wait();  // resident there
  for (int round = 0; round < 3; ++round) {
    // About 2 GFLOP: far longer than the first wait.
    auto t = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), 1.0, 1.0, 0, 0, remote);
    const bool early = t.wait_for(std::chrono::microseconds(200));
    if (round == 0) {
      EXPECT_FALSE(early) << "a 2 GFLOP gemm finished within 200 us";
    }
    if (round == 1) {
      for (int i = 0; i < 20 && !t.wait_for(std::chrono::milliseconds(1)); ++i) {
      }
    }
    t.wait();
    EXPECT_EQ(t.device(), "remote:" + server.address());
  }
  auto h = c.host_read();
  EXPECT_EQ(h[0], 3.0 * static_cast<double>(n));
  EXPECT_EQ(h[n * n - 1], 3.0 * static_cast<double>(n));
}

}  // namespace
