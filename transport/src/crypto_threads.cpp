#include "crypto_threads.hpp"

#include <algorithm>
#include <exception>

#include "ferry/log.hpp"

namespace ferry::transport {

CryptoThreads::CryptoThreads(unsigned threads) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) lanes_.push_back(std::make_unique<Lane>());
}

CryptoThreads::~CryptoThreads() {
  for (auto& lane : lanes_) {
    {
      std::lock_guard lock(lane->mutex);
      lane->stop = true;
    }
    lane->cv.notify_one();
  }
  for (auto& lane : lanes_)
    if (lane->thread.joinable()) lane->thread.join();
}

unsigned CryptoThreads::default_threads() { return std::clamp(std::thread::hardware_concurrency(), 1u, 4u); }

void CryptoThreads::run(std::size_t key, std::function<void()> job) {
  Lane& lane = *lanes_[key % lanes_.size()];
  {
    std::lock_guard lock(lane.mutex);
    lane.jobs.push_back(std::move(job));
    if (!lane.thread.joinable()) lane.thread = std::thread([&lane] { lane.loop(); });
  }
  lane.cv.notify_one();
}

void CryptoThreads::Lane::loop() {
  std::unique_lock lock(mutex);
  for (;;) {
    cv.wait(lock, [this] { return stop || !jobs.empty(); });
    if (jobs.empty()) return;  // stopping, nothing left
    auto job = std::move(jobs.front());
    jobs.pop_front();
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      log().error("ucx: opening a sealed payload threw: {}", e.what());
    }
    job = nullptr;
    lock.lock();
  }
}

}  // namespace ferry::transport
