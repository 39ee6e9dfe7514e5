// StarPU as a peer in the benchmarks (libstarpu-dev, optional: included only
// where FERRY_BENCH_WITH_STARPU): started the same way by each benchmark.
#pragma once

#include <fmt/format.h>
#include <starpu.h>

#include <stdexcept>

namespace ferry::bench {

inline void starpu_check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(fmt::format("StarPU: {} failed ({})", what, rc));
}

// StarPU on `cpus` CPU workers and nothing else, under scheduler `sched`,
// uncalibrated: a row measures the scheduler, not its calibration runs.
inline void start_starpu_on_cpus(const char* sched, int cpus) {
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.sched_policy_name = sched;
  conf.precedence_over_environment_variables = 1;  // a user's STARPU_SCHED must not change the row
  conf.ncpus = cpus;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  conf.calibrate = 0;
  conf.bus_calibrate = 0;
  starpu_check(starpu_init(&conf), "starpu_init");
}

}  // namespace ferry::bench
