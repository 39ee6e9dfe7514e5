#include "background.hpp"

#include <algorithm>

#include "ferry/log.hpp"

namespace ferry::ferryd {

Background::Background() : thread_([this](std::stop_token stop) { run(stop); }) {}

Background::~Background() {
  thread_.request_stop();
  thread_.join();
}

void Background::post(const std::string& client, std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(turns_.begin(), turns_.end(), [&](const Queue& q) { return q.client == client; });
    if (it == turns_.end()) it = turns_.insert(turns_.end(), Queue{client, {}});
    it->jobs.push_back(std::move(job));
    ++waiting_;
  }
  wake_.notify_one();
}

std::function<void()> Background::take() {
  Queue& front = turns_.front();
  auto job = std::move(front.jobs.front());
  front.jobs.pop_front();
  --waiting_;
  if (front.jobs.empty()) turns_.pop_front();
  else turns_.splice(turns_.end(), turns_, turns_.begin());  // its next job after everyone else's
  return job;
}

void Background::run(std::stop_token stop) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stop, [&] { return waiting_ > 0; })) return;
      job = take();
    }
    try {
      job();
    } catch (const std::exception& e) {
      // A job answers its own errors; one that escapes is a bug, not a reason to stop serving.
      log().error("ferryd background job failed: {}", e.what());
    }
  }
}

}  // namespace ferry::ferryd
