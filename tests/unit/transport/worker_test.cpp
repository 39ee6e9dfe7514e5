// The worker: its progress thread's calls and posts, its sleep when idle,
// and a waiting thread that drives it and takes its reply in itself.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(Worker, CallReturnsRethrowsAndRunsOnTheProgressThread) {
  auto worker = Worker::create();
  EXPECT_FALSE(worker->on_progress_thread());
  EXPECT_TRUE(worker->call([&] { return worker->on_progress_thread(); }));
  EXPECT_EQ(worker->call([] { return 42; }), 42);
  EXPECT_THROW(worker->call([]() -> int { throw UsageError("boom"); }), UsageError);
  EXPECT_NE(worker->transports().find("tcp"), std::string::npos) << worker->transports();
}

TEST(Worker, PostFromManyThreadsRunsEverythingInOrderPerThread) {
  auto worker = Worker::create();
  constexpr int threads = 4, per_thread = 2000;
  std::vector<std::vector<int>> seen(threads);  // touched only on the progress thread
  std::vector<std::thread> posters;
  for (int t = 0; t < threads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) worker->post([&seen, t, i] { seen[t].push_back(i); });
    });
  }
  for (auto& poster : posters) poster.join();
  // call() queues behind every post above, so all of them have run when it returns.
  auto counts = worker->call([&] {
    std::vector<std::size_t> sizes;
    for (auto& s : seen) sizes.push_back(s.size());
    return sizes;
  });
  for (int t = 0; t < threads; ++t) {
    ASSERT_EQ(counts[t], static_cast<std::size_t>(per_thread));
    for (int i = 0; i < per_thread; ++i) ASSERT_EQ(seen[t][i], i);
  }
  // Posting from the progress thread runs after the current function.
  auto order = worker->call([&] {
    auto list = std::make_shared<std::vector<int>>();
    worker->post([list] { list->push_back(2); });
    list->push_back(1);
    return list;
  });
  worker->call([] {});
  EXPECT_EQ(*order, (std::vector<int>{1, 2}));
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

TEST(Worker, IdleWithAConnectionBurnsNoCpu) {
  Server server;
  Client client(server.listener->port());
  EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  std::this_thread::sleep_for(200ms);  // let connection setup settle
  auto before = process_cpu_seconds();
  std::this_thread::sleep_for(1s);
  auto used = process_cpu_seconds() - before;
  std::cout << "  idle CPU over 1 s (two workers, one connection): " << used * 1000 << " ms\n";
  RecordProperty("idle_cpu_ms", std::to_string(used * 1000));
  EXPECT_LT(used, 0.1);
}

// Polling after activity is bounded: once the traffic stops, a worker that
// polls for 2 ms after each message still goes to sleep (a test that fails
// if the poll never ends: the thread would burn its whole core).
TEST(Worker, PollingAfterActivityStillSleepsWhenIdle) {
  ScopedEnv poll("FERRY_UCX_POLL_US", "2000");
  Server server;
  Client client(server.listener->port());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  std::this_thread::sleep_for(200ms);
  const auto before = process_cpu_seconds();
  std::this_thread::sleep_for(1s);
  const auto used = process_cpu_seconds() - before;
  std::cout << "  idle CPU over 1 s after traffic, polling 2 ms after activity: " << used * 1000 << " ms\n";
  EXPECT_LT(used, 0.1);
}

// Voluntary context switches of this process's threads named `comm`
// (the progress thread of Worker "client" is "client-ucx").
long switches_of(const std::string& comm) {
  long total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream name_file(task.path() / "comm");
    std::string name;
    std::getline(name_file, name);
    if (name != comm) continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stol(line.substr(24));
  }
  return total;
}

// A message sent while the progress thread sleeps leaves from the sending
// thread (the worker's lock, UCS_THREAD_MODE_SERIALIZED): the progress
// thread is not woken for it. Before, every such send cost it one wake-up.
TEST(Worker, ASendWhileTheProgressThreadSleepsDoesNotWakeIt) {
  // No replies: nothing else wakes the client's progress thread.
  auto received = std::make_shared<Inbox<std::string>>();
  Server server([received](Connection&, Incoming& in) {
    received->push(std::string(reinterpret_cast<const char*>(in.header().data()), in.header().size()));
  });
  Client client(server.listener->port());
  ASSERT_EQ(send_and_wait(*client.connection, text_bytes("hi"), nullptr, 0), "");
  std::this_thread::sleep_for(200ms);  // wire-up done, the progress thread asleep
  const long before = switches_of("client-ucx");
  constexpr int sends = 200;
  for (int i = 0; i < sends; ++i) {
    ASSERT_EQ(send_and_wait(*client.connection, text_bytes("m" + std::to_string(i)), nullptr, 0), "");
    std::this_thread::sleep_for(1ms);  // let it sleep again, were it woken
  }
  const long woken = switches_of("client-ucx") - before;
  std::cout << "  client progress thread woken " << woken << " times for " << sends << " sends\n";
  EXPECT_LT(woken, sends / 4);
  const auto got = received->wait(sends + 1, 30s);  // all of them, in order
  ASSERT_EQ(got.size(), sends + 1u);
  for (int i = 0; i < sends; ++i) EXPECT_EQ(got[i + 1], "m" + std::to_string(i));
}

// Whether the thread named `comm` of this process sleeps in poll() (the
// kernel function it waits in says so), waiting up to 2 s for it to.
bool wait_until_asleep_in_poll(const std::string& comm) {
  for (int tries = 0; tries < 2000; ++tries) {
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream name_file(task.path() / "comm");
      std::string name, wchan;
      std::getline(name_file, name);
      if (name != comm) continue;
      std::ifstream wchan_file(task.path() / "wchan");
      std::getline(wchan_file, wchan);
      if (wchan.find("poll") != std::string::npos) return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// A thread that waits for a reply and drives the worker meanwhile
// (Worker::wait_here) takes the reply in itself: its handler runs on that
// thread, not on the progress thread, which stays asleep.
TEST(Worker, AWaitingThreadTakesItsReplyInItself) {
  Server server;
  Worker::Options options{"client"};
  options.poll_while_waiting = 2s;  // far longer than a loopback echo takes
  auto worker = Worker::create(options);
  std::mutex mutex;
  std::vector<std::pair<std::string, std::thread::id>> replies;
  auto connection = connect(
      worker, server.listener->port(),
      [&](Connection&, Incoming& in) {
        std::lock_guard lock(mutex);
        replies.emplace_back(bytes_text(in.header()), std::this_thread::get_id());
      },
      [](Connection&, const std::string&) {});
  auto count = [&] {
    std::lock_guard lock(mutex);
    return replies.size();
  };
  constexpr std::size_t rounds = 40;
  std::size_t taken_here = 0, i = 0;
  // Up to three tries of 40 rounds: on a loaded machine (ctest runs other
  // tests beside this one) the progress thread, woken by a reply that came
  // while this thread was descheduled, can win every round of one try (CI
  // saw 0 of 40 once).
  for (int attempt = 0; attempt < 3 && taken_here == 0; ++attempt) {
    for (std::size_t round = 0; round < rounds; ++round, ++i) {
      // The progress thread asleep again (it wakes on each reply's arrival):
      // on a loaded machine it may take a while to get back to sleep.
      ASSERT_TRUE(wait_until_asleep_in_poll("client-ucx"));
      connection->send(text_bytes("m" + std::to_string(i)));
      const bool came = connection->wait_here([&] { return count() > i; });
      if (!came) {  // the progress thread was awake and delivers it: wait as anyone would
        for (int tries = 0; tries < 1000 && count() <= i; ++tries) std::this_thread::sleep_for(1ms);
      }
      std::lock_guard lock(mutex);
      ASSERT_EQ(replies.size(), i + 1);
      EXPECT_EQ(replies[i].first, "m" + std::to_string(i));
      if (replies[i].second == std::this_thread::get_id()) ++taken_here;
    }
  }
  std::cout << "  " << taken_here << " of " << i << " replies taken in by the waiting thread\n";
  // Quiet: 39-40 of 40. On a loaded machine fewer (7 of 40 at worst beside
  // two busy loops on both cores, none in one try of CI's). Without
  // wait_here (FERRY_UCX_WAIT_POLL_US=0): none in all three tries.
  EXPECT_GT(taken_here, 0u);
  connection->close();
}

// Nor does a reply that a waiting thread takes in wake the sleeping
// progress thread: the worker's fd is out of its sleep set while the waiter
// drives (on two cores, that wake-up was a third runnable thread beside the
// waiter and the peer, and the loopback round trip's slow mode).
TEST(Worker, AReplyTakenInByAWaiterLeavesTheProgressThreadAsleep) {
  // As between two hosts: beside a shared-memory lane the fd stays (worker_impl.hpp).
  ScopedEnv no_lane("FERRY_SHARED_MEMORY", "0");
  // Answered a moment later, so that the reply comes while the waiter
  // drives: one that beats it there finds the progress thread's set as ever.
  Server server([](Connection& connection, Incoming& in) {
    std::this_thread::sleep_for(2ms);
    echo(connection, in);
  });
  Worker::Options options{"client"};
  options.poll_while_waiting = 2s;
  auto worker = Worker::create(options);
  std::atomic<std::size_t> replies{0};
  auto connection = connect(
      worker, server.listener->port(), [&](Connection&, Incoming&) { ++replies; },
      [](Connection&, const std::string&) {});
  ASSERT_EQ(send_and_wait(*connection, text_bytes("hello"), nullptr, 0), "");
  for (int tries = 0; tries < 1000 && replies.load() == 0; ++tries) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(replies.load(), 1u);
  constexpr std::size_t rounds = 40;
  ASSERT_TRUE(wait_until_asleep_in_poll("client-ucx"));
  const long before = switches_of("client-ucx");
  std::size_t taken_here = 0;
  for (std::size_t i = 1; i <= rounds; ++i) {
    const std::size_t expected = replies.load() + 1;
    connection->send(text_bytes("m"));
    if (connection->wait_here([&] { return replies.load() >= expected; })) ++taken_here;
    for (int tries = 0; tries < 1000 && replies.load() < expected; ++tries) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(replies.load(), expected);
  }
  const long woken = switches_of("client-ucx") - before;
  std::cout << "  the progress thread woke " << woken << " times in " << rounds << " round trips; " << taken_here
            << " replies taken in by the waiter\n";
  // Before: one wake-up per reply (40). Now none when quiet; a loaded
  // machine may make a waiter miss its reply now and then (the progress
  // thread then delivers it, which is a wake-up).
  EXPECT_GT(taken_here, rounds / 2);
  EXPECT_LT(woken, static_cast<long>(rounds / 4));
  connection->close();
}

// Work posted to a worker while a waiting thread drives it is done by that
// thread, at once: the sleeping progress thread is not signalled for it.
// Here the reply waited for comes only after another thread's send, which
// must therefore leave while the waiter drives.
// A wake-up sent to the sleeping progress thread must survive a waiter
// that starts to drive before the progress thread got up: the driver takes
// the worker's fd out of the sleep set and re-arms the worker, which ate
// the wake-up, and the progress thread slept on while work queued behind
// it, until some network event came (a client's handshake stalled for 10 s
// in Worker::address, issue 36).
TEST(Worker, AWakeUpSentJustBeforeAWaiterDrivesIsNotLost) {
  Worker::Options options{"race"};
  options.poll_while_waiting = 50us;
  auto worker = Worker::create(options);
  std::mutex mutex;
  std::condition_variable cv;
  int round = 0, driven = 0;
  bool stop = false;
  std::thread driver([&] {
    for (;;) {
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || round > driven; });
        if (stop) return;
      }
      worker->wait_here([] { return false; });  // drives for its budget
      std::lock_guard lock(mutex);
      ++driven;
      cv.notify_all();
    }
  });
  int lost = 0, rounds = 0;
  const auto until = std::chrono::steady_clock::now() + 4s;
  while (lost == 0 && std::chrono::steady_clock::now() < until) {
    ++rounds;
    std::this_thread::sleep_for(200us);  // the progress thread asleep
    worker->post([] {});                 // wakes it...
    {
      std::lock_guard lock(mutex);       // ...while a waiter starts to drive
      ++round;
      cv.notify_all();
    }
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return driven == round; });
    }
    // Nobody drives now: only the progress thread can run this.
    auto ran = std::make_shared<std::promise<void>>();
    auto future = ran->get_future();
    worker->post([ran] { ran->set_value(); });
    if (future.wait_for(2s) != std::future_status::ready) {
      ++lost;
      worker->wait_here([&] { return future.wait_for(0s) == std::future_status::ready; });  // let it go
    }
  }
  {
    std::lock_guard lock(mutex);
    stop = true;
    cv.notify_all();
  }
  driver.join();
  EXPECT_EQ(lost, 0) << "the progress thread slept through work posted after round " << rounds;
  std::cout << "  " << rounds << " rounds\n";
}

TEST(Worker, ASendFromAnotherThreadLeavesWhileAWaiterDrives) {
  auto trigger = std::make_shared<std::atomic<bool>>(false);
  Server server([](Connection& connection, Incoming& in) {
    if (bytes_text(in.header()) == "go") connection.send(text_bytes("answer"));
  });
  Worker::Options options{"client"};
  options.poll_while_waiting = 5s;
  auto worker = Worker::create(options);
  std::atomic<bool> answered{false};
  auto connection = connect(
      worker, server.listener->port(),
      [&](Connection&, Incoming& in) {
        if (bytes_text(in.header()) == "answer") answered = true;
      },
      [](Connection&, const std::string&) {});
  ASSERT_EQ(send_and_wait(*connection, text_bytes("hello"), nullptr, 0), "");
  std::this_thread::sleep_for(200ms);  // wire-up done, the progress thread asleep
  std::thread other([&] {
    std::this_thread::sleep_for(20ms);  // the waiter drives by now
    connection->send(text_bytes("go"));
  });
  const bool came = connection->wait_here([&] { return answered.load(); });
  other.join();
  EXPECT_TRUE(came) << "the reply did not come while the waiter drove: the other thread's send waited";
  for (int tries = 0; tries < 5000 && !answered; ++tries) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(answered);
  connection->close();
}

// A waiter's poll is bounded: when the reply is slow it gives up, and the
// progress thread, woken by the reply as ever, delivers it.
TEST(Worker, AWaiterGivesUpAfterItsBudgetAndTheProgressThreadDelivers) {
  Server server([](Connection&, Incoming&) {});  // never answers by itself
  Worker::Options options{"client"};
  options.poll_while_waiting = 1ms;
  auto worker = Worker::create(options);
  Inbox<std::thread::id> handled;
  auto connection = connect(
      worker, server.listener->port(), [&](Connection&, Incoming&) { handled.push(std::this_thread::get_id()); },
      [](Connection&, const std::string&) {});
  ASSERT_EQ(send_and_wait(*connection, text_bytes("hello"), nullptr, 0), "");
  auto accepted = server.connection(0);
  ASSERT_NE(accepted, nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(connection->wait_here([&] { return handled.size() > 0; }));
  const auto polled = std::chrono::steady_clock::now() - start;
  accepted->send(text_bytes("late"));
  const auto got = handled.wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0], std::this_thread::get_id());
  std::cout << "  gave up after " << std::chrono::duration<double, std::micro>(polled).count() << " us\n";
  connection->close();
}

}  // namespace
}  // namespace ferry::transport
