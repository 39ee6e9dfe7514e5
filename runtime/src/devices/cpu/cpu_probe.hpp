// The CPU's measured peak rates, one worker's worth (tasks run one per
// worker on single-threaded BLAS): a short timed dgemm and daxpy, once per
// process. They turn a kernel's cost hint into the first estimate for the
// CPU, so a new machine's first run is not a guess from fixed numbers.
#pragma once

#include "ferry/runtime/perf_model.hpp"

namespace ferry::detail {

// Measured on first call (about 20 ms), then remembered.
const DevicePeak& cpu_probe();

}  // namespace ferry::detail
