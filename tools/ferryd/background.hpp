// One thread for ferryd's work that may take long and must not run on the
// progress thread, which every client's messages, handshakes and shutdown
// share: reading a kernel definition's source, and bringing a replica's
// data home from a GPU before a get or a put (Session::with_host), which
// waits for the tasks using it. A job posts its answer back to the
// progress thread itself.
//
// Fair between clients: each client's jobs wait in a queue of its own, and
// the thread takes one job from each client in turn (round robin), so one
// client's backlog of big definitions delays another client's by at most
// one job per client ahead of it, not by the whole backlog.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ferry::ferryd {

class Background {
 public:
  Background();
  // Finishes the job running, drops the ones waiting.
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // `client` names whose job it is (the fair share's key of the session).
  void post(const std::string& client, std::function<void()> job);

 private:
  struct Queue {
    std::string client;
    std::deque<std::function<void()>> jobs;
  };
  void run(std::stop_token stop);
  std::function<void()> take();  // mutex_ held, some job waiting

  std::mutex mutex_;
  std::condition_variable_any wake_;
  // Clients with jobs waiting, in the order they are served: the front's
  // first job goes next, then that client goes to the back (or away, empty).
  std::list<Queue> turns_;
  std::size_t waiting_ = 0;
  std::jthread thread_;  // last: it starts once the rest is there
};

}  // namespace ferry::ferryd
