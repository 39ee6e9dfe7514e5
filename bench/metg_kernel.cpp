// The METG benchmark's stencil point as a kernel plugin, so that ferryd
// can run it: a lambda kernel stays in the process that made it, a
// FERRY_KERNEL in a shared library runs wherever the library is loaded.
//
//   ferryd --plugin libferry_metg_plugin.so
//   rt.load_plugin("libferry_metg_plugin.so");
//   rt.submit("metg_point", ferry::read(l), ferry::read(m), ferry::read(r), ferry::write(out), iterations);
#include <fmt/format.h>

#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"
#include "metg_stencil.hpp"

namespace {

ferry::Param point_param(const char* name, ferry::AccessMode mode) {
  return ferry::Param{name, ferry::ParamKind::buffer, mode, {ferry::DType::f64}, {}};
}

}  // namespace

FERRY_KERNEL(metg_point) {
  namespace metg = ferry::bench::metg;
  ferry::KernelDef k;
  k.name = "metg_point";
  k.summary = "one Task Bench stencil point: out = f(left, mid, right) after `iterations` rounds of 24 multiply-adds";
  k.params = {point_param("left", ferry::AccessMode::read), point_param("mid", ferry::AccessMode::read),
              point_param("right", ferry::AccessMode::read), point_param("out", ferry::AccessMode::write),
              ferry::Param{"iterations", ferry::ParamKind::integer, ferry::AccessMode::read, {}, {}}};
  k.validate = [](const ferry::KernelArgs& args) {
    for (std::size_t i = 0; i < 4; ++i) {
      const ferry::BufferArg& b = args.buffer(i);
      if (b.elements() != metg::values_per_point || !b.contiguous())
        throw ferry::UsageError(fmt::format("argument {} holds {} x {} values; a point is {} contiguous doubles",
                                            i + 1, b.rows, b.cols, metg::values_per_point));
    }
    if (args.integer(4) < 0) throw ferry::UsageError("iterations must not be negative");
  };
  k.cost = [](const ferry::KernelArgs& args) {
    return ferry::Cost{static_cast<double>(args.integer(4)) * metg::flops_per_iteration,
                       4.0 * metg::values_per_point * sizeof(double)};
  };
  k.cpu = [](ferry::ExecContext& ctx) {
    const ferry::KernelArgs& a = ctx.args;
    metg::point(a.integer(4), a.buffer(0).as<const double>(), a.buffer(1).as<const double>(),
                a.buffer(2).as<const double>(), a.buffer(3).as<double>());
  };
  return k;
}
