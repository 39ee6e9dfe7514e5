// One thread for ferryd's work that may take long and must not run on the
// progress thread, which every client's messages, handshakes and shutdown
// share: reading a kernel definition's source. A job posts its answer back
// to the progress thread itself.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry::ferryd {

class Background {
 public:
  Background();
  // Finishes the job running, drops the ones waiting.
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  void post(std::function<void()> job);

 private:
  void run(std::stop_token stop);

  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<std::function<void()>> jobs_;
  std::jthread thread_;  // last: it starts once the rest is there
};

}  // namespace ferry::ferryd
