// Threads that open large sealed payloads, and copy large pulled ones, off
// the progress thread. Opening a 4 MiB chunk costs about a millisecond; on
// the progress thread it held up the receive of the next chunk, so a sealed
// stream paid receive + open per chunk in series. Here the next chunk
// arrives while this one is opened. Jobs with the same key run on the same
// thread in the order given: a sealed connection's payloads (keyed by the
// connection) land in the order they arrived, as they did when the progress
// thread opened them. Pulled payloads are keyed each by its own number, so
// the chunks of one transfer are copied side by side (one core's copy does
// not reach the memory's rate). Each thread starts on first use (a
// plaintext worker without pulls never has one); idle threads block.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::transport {

class CryptoThreads {
 public:
  explicit CryptoThreads(unsigned threads);
  ~CryptoThreads();  // runs what is queued, then joins
  CryptoThreads(const CryptoThreads&) = delete;
  CryptoThreads& operator=(const CryptoThreads&) = delete;

  // Runs job on the thread for `key`, after the jobs given for it before.
  void run(std::size_t key, std::function<void()> job);

  // How many threads a worker gets on this machine: one per core, at most
  // four (a sealed payload is opened by one thread, so more help sealed
  // streams only when several connections stream at once; the chunks of
  // one pulled transfer use them all).
  static unsigned default_threads();

 private:
  struct Lane {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stop = false;
    std::thread thread;
    void loop();
  };
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace ferry::transport
