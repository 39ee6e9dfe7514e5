#include <cstdio>
#include <cstring>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/statistics_adaptor.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

int main() {
  auto stats = std::make_shared<ferry::StatisticsAdaptor>(std::make_shared<ferry::PinnedPool>());
  void* p = stats->allocate(1 << 20);
  std::memset(p, 0xab, 1 << 20);
  const bool counted = stats->stats().bytes_in_use == (1u << 20);
  stats->deallocate(p, 1 << 20);

  // The installed runtime runs a task; with gpus "all" it looks for the
  // installed CUDA module and says what it found.
  ferry::Runtime::Options options;
  options.workers = 1;
  options.persist_perf_models = false;
  options.read_environment = false;
  options.gpus = "all";
  ferry::Runtime rt(options);
  auto x = rt.buffer<double>(100);
  rt.submit("fill", ferry::write(x), 2.0);
  const bool summed = rt.submit("sum", ferry::read(x)).result() == 200.0;
  const ferry::cuda::ModuleStatus& module = ferry::cuda::module_status();
  // A CUDA build's module lies beside the installed core and loads (its CUDA
  // libraries are on this machine: it was built here).
  const bool module_ok = ferry::config::with_cuda ? module.state == ferry::cuda::ModuleStatus::State::loaded
                                                  : module.state == ferry::cuda::ModuleStatus::State::not_built;
  std::printf("consumer of ferry %s: %s; task %s; CUDA module %s (%s%s)\n", ferry::config::version,
              counted ? "ok" : "wrong statistics", summed ? "ok" : "wrong result", ferry::cuda::to_string(module.state),
              module.path.c_str(), module.detail.c_str());
  return counted && summed && module_ok && stats->stats().bytes_in_use == 0 ? 0 : 1;
}
