// A kernel plugin: kernels that travel. A kernel made with rt.kernel() (a
// function or lambda) runs only in the process that made it; one in a
// shared library registered with FERRY_KERNEL runs wherever the library is
// loaded: in your program (rt.load_plugin) and on a GPU host (ferryd
// --plugin). Build: this folder's CMake target ferry_sample_plugin gives
// libferry_sample_plugin.so.
//
//   ferryd --listen 0.0.0.0:7070 --token-file T --plugin libferry_sample_plugin.so
//   rt.load_plugin("libferry_sample_plugin.so");
//   rt.submit("clamp", ferry::readwrite(x), 0.0, 1.0);   // may run here or there
#include <algorithm>
#include <type_traits>

#include "ferry/runtime/kernel.hpp"

// x[i] = min(max(x[i], lo), hi), for f32 and f64.
FERRY_KERNEL(clamp) {
  ferry::KernelDef k;
  k.name = "clamp";
  k.summary = "x[i] = min(max(x[i], lo), hi)";
  k.params = {
      ferry::Param{"x", ferry::ParamKind::buffer, ferry::AccessMode::readwrite, {ferry::DType::f32, ferry::DType::f64}, {}},
      ferry::Param{"lo", ferry::ParamKind::real, ferry::AccessMode::read, {}, {}},
      ferry::Param{"hi", ferry::ParamKind::real, ferry::AccessMode::read, {}, {}},
  };
  // A cost hint seeds the scheduler's model before the first measured run.
  k.cost = [](const ferry::KernelArgs& args) {
    const auto& x = args.buffer(0);
    return ferry::Cost{2.0 * static_cast<double>(x.elements()), 2.0 * static_cast<double>(x.bytes())};
  };
  k.cpu = [](ferry::ExecContext& ctx) {
    const ferry::BufferArg& x = ctx.args.buffer(0);
    const double lo = ctx.args.real(1), hi = ctx.args.real(2);
    const auto clamp_all = [&](auto* data) {
      for (std::size_t r = 0; r < x.rows; ++r)
        for (std::size_t c = 0; c < x.cols; ++c) {
          auto& v = data[r * x.ld + c];
          v = std::clamp(v, static_cast<std::remove_reference_t<decltype(v)>>(lo),
                         static_cast<std::remove_reference_t<decltype(v)>>(hi));
        }
    };
    if (x.dtype == ferry::DType::f32) clamp_all(x.as<float>());
    else clamp_all(x.as<double>());
  };
  return k;
}
