// A kernel plugin, loaded by runtime_test through Runtime::load_plugin.
#include "ferry/runtime/kernel.hpp"

FERRY_KERNEL(test_plugin_iota) {
  ferry::KernelDef k;
  k.name = "test_plugin_iota";
  k.summary = "x[i] = i";
  k.params = {ferry::Param{"x", ferry::ParamKind::buffer, ferry::AccessMode::write, {ferry::DType::f64}, {}}};
  k.cpu = [](ferry::ExecContext& ctx) {
    const ferry::BufferArg& x = ctx.args.buffer(0);
    for (std::size_t i = 0; i < x.elements(); ++i) x.as<double>()[i] = static_cast<double>(i);
  };
  return k;
}
