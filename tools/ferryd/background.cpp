#include "background.hpp"

#include "ferry/log.hpp"

namespace ferry::ferryd {

Background::Background() : thread_([this](std::stop_token stop) { run(stop); }) {}

Background::~Background() {
  thread_.request_stop();
  thread_.join();
}

void Background::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void Background::run(std::stop_token stop) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stop, [&] { return !jobs_.empty(); })) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
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
