// A test-only kernel plugin: `sleep_ms` holds a device lane for a given time
// without using the CPU, standing in for GPU work on a machine with few
// cores. It lets tests and benchmarks count how ferryd and the scheduler
// share lanes (fair sharing, several hosts) without measuring CPU speed.
//
//   ferryd --plugin libferry_sleep_plugin.so
//   rt.submit("sleep_ms", ferry::readwrite(x), 20.0);   // 20 ms on a worker
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "ferry/runtime/kernel.hpp"

FERRY_KERNEL(sleep_ms) {
  ferry::KernelDef k;
  k.name = "sleep_ms";
  k.summary = "holds a lane for ms milliseconds; x[0] += 1 (so a reader sees that it ran)";
  k.params = {
      ferry::Param{"x", ferry::ParamKind::buffer, ferry::AccessMode::readwrite, {ferry::DType::f32, ferry::DType::f64}, {}},
      ferry::Param{"ms", ferry::ParamKind::real, ferry::AccessMode::read, {}, {}},
  };
  k.cpu = [](ferry::ExecContext& ctx) {
    const double ms = ctx.args.real(1);
    // Bounded: a test's typo must not hold a worker for hours.
    if (!(ms >= 0 && ms <= 10000)) throw std::invalid_argument("sleep_ms: ms must lie in [0, 10000]");
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    const ferry::BufferArg& x = ctx.args.buffer(0);
    if (x.dtype == ferry::DType::f32) x.as<float>()[0] += 1.0f;
    else x.as<double>()[0] += 1.0;
  };
  return k;
}
