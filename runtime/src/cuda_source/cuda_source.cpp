// A kernel definition from CUDA source: parameters from the signature, the
// launch values as hidden trailing parameters, and (with CUDA) NVRTC behind
// the `cuda` implementation.
#include "ferry/runtime/cuda_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "cuda_source/cuda_signature.hpp"
#include "ferry/config.hpp"
#include "ferry/error.hpp"
#include "cuda_port/cuda_module.hpp"

namespace ferry {

KernelDef make_cuda_source_kernel(CudaSource source, std::vector<std::string> writes) {
  auto signature = std::make_shared<const detail::CudaSignature>(detail::parse_cuda_signature(source.source, source.entry));
  for (const std::string& name : writes) {
    const auto it = std::find_if(signature->params.begin(), signature->params.end(),
                                 [&](const detail::CudaParam& p) { return p.name == name; });
    if (it == signature->params.end())
      throw UsageError(fmt::format("cuda_kernel '{}': writes names '{}', which is not one of its parameters",
                                   source.entry, name));
    if (!it->pointer)
      throw UsageError(fmt::format("cuda_kernel '{}': writes names '{}', which is a {}, not a pointer", source.entry,
                                   name, it->spelling));
    if (it->const_pointee)
      throw UsageError(fmt::format("cuda_kernel '{}': writes names '{}', which points to const data ({})", source.entry,
                                   name, it->spelling));
  }

  KernelDef def;
  def.name = source.entry;
  def.summary = "CUDA source kernel (compiled with NVRTC)";
  for (const detail::CudaParam& p : signature->params) {
    Param param;
    param.name = p.name;
    if (p.pointer) {
      param.kind = ParamKind::buffer;
      const bool written = std::find(writes.begin(), writes.end(), p.name) != writes.end();
      param.mode = p.const_pointee ? AccessMode::read : written ? AccessMode::write : AccessMode::readwrite;
      param.dtypes = detail::buffer_dtypes(p.type);
    } else {
      param.kind = detail::is_real(p.type) ? ParamKind::real : ParamKind::integer;
    }
    def.params.push_back(std::move(param));
  }
  for (const char* name : detail::launch_param_names) {
    Param param;
    param.name = name;
    param.kind = ParamKind::integer;
    param.default_value = ScalarValue{std::int64_t{0}};
    def.params.push_back(std::move(param));
  }
  def.validate = [signature](const KernelArgs& args) { detail::check_cuda_arguments(*signature, args); };
  def.cost = [](const KernelArgs& args) {
    Cost cost;
    for (const Arg& arg : args.items)
      if (const auto* b = std::get_if<BufferArg>(&arg)) cost.bytes += static_cast<double>(b->bytes());
    return cost;
  };
  auto shared = std::make_shared<const CudaSource>(std::move(source));
  if (config::with_cuda) {
    // NVRTC lives in the CUDA module: asked for on the first local launch.
    def.cuda = detail::lazy_cuda_kernel(fmt::format("kernel {} (CUDA source)", shared->entry),
                                        [shared, signature](const detail::CudaModule& module) {
                                          return module.nvrtc_launcher(shared, signature);
                                        });
  } else {
    // Still a `cuda` implementation, so the definition is complete: such a
    // runtime has no local GPU to call it on, and a remote host compiles the source.
    def.cuda = [entry = shared->entry](ExecContext&) {
      throw Error(fmt::format("kernel {}: this build of Ferry has no CUDA (FERRY_WITH_CUDA=OFF), so it cannot compile "
                              "CUDA source; run it on a remote GPU host",
                              entry));
    };
  }
  def.cuda_source = std::move(shared);
  return def;
}

}  // namespace ferry
