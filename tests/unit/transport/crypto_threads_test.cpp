// The threads that open large sealed payloads and copy pulled ones.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>
#include <vector>

#include "crypto_threads.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

TEST(CryptoThreads, RunsEachKeysJobsInOrderOnOneThreadAndFinishesTheQueueBeforeItGoes) {
  std::mutex mutex;
  std::map<std::size_t, std::vector<int>> order;
  std::map<std::size_t, std::set<std::thread::id>> threads;
  {
    CryptoThreads pool(2);
    for (int i = 0; i < 60; ++i) {
      const std::size_t key = static_cast<std::size_t>(i % 3);
      pool.run(key, [&, key, i] {
        if (i % 7 == 0) std::this_thread::sleep_for(1ms);
        std::lock_guard lock(mutex);
        order[key].push_back(i);
        threads[key].insert(std::this_thread::get_id());
      });
    }
  }
  ASSERT_EQ(order.size(), 3u);
  for (auto& [key, seen] : order) {
    EXPECT_EQ(seen.size(), 20u) << "key " << key;
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end())) << "key " << key << " ran out of order";
    EXPECT_EQ(threads[key].size(), 1u) << "key " << key;
    EXPECT_EQ(threads[key].count(std::this_thread::get_id()), 0u);
  }
}

}  // namespace
}  // namespace ferry::transport
