#include <cstdio>
#include <cstring>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/statistics_adaptor.hpp"
#include "ferry/config.hpp"

int main() {
  auto stats = std::make_shared<ferry::StatisticsAdaptor>(std::make_shared<ferry::PinnedPool>());
  void* p = stats->allocate(1 << 20);
  std::memset(p, 0xab, 1 << 20);
  const bool counted = stats->stats().bytes_in_use == (1u << 20);
  stats->deallocate(p, 1 << 20);
  std::printf("consumer of ferry %s: %s\n", ferry::config::version, counted ? "ok" : "wrong statistics");
  return counted && stats->stats().bytes_in_use == 0 ? 0 : 1;
}
