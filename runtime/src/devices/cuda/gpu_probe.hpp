// A GPU's measured peak rates: a short timed cuBLAS SGEMM and a device-to-
// device copy, once per GPU and process, so a new GPU's first estimates are
// its real rates rather than its data sheet's. CUDA module only.
#pragma once

#include "ferry/runtime/perf_model.hpp"

namespace ferry::detail {

// `sheet` (the rates from the device's attributes) where the probe cannot
// run; otherwise the measured rates, with sheet's launch overhead.
DevicePeak gpu_probe(int ordinal, const DevicePeak& sheet);

}  // namespace ferry::detail
