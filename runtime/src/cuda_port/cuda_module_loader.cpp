// The core's way to the CUDA module (cuda_port/cuda_module.hpp): common loads
// libferry_cuda.so, this finds the runtime's half of its interface there.
#include <fmt/format.h>

#include <mutex>
#include <utility>

#include "cuda_port/cuda_module.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/detail/cuda_driver.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

const CudaModule* cuda_module() {
  static const CudaModule* const loaded = [] {
    using Entry = const CudaModule* (*)();
    auto entry = reinterpret_cast<Entry>(cuda_module_symbol(FERRY_CUDA_MODULE_RUNTIME_SYMBOL));
    return entry != nullptr ? entry() : nullptr;
  }();
  return loaded;
}

KernelFn lazy_cuda_kernel(std::string what, std::function<KernelFn(const CudaModule&)> make) {
  struct Resolved {
    std::once_flag once;
    KernelFn fn;
  };
  auto resolved = std::make_shared<Resolved>();
  return [what = std::move(what), make = std::move(make), resolved](ExecContext& ctx) {
    // Only a CUDA device calls this, and only a loaded module makes one.
    std::call_once(resolved->once, [&] {
      if (const CudaModule* module = cuda_module()) resolved->fn = make(*module);
    });
    if (!resolved->fn) {
      const cuda::ModuleStatus& status = cuda::module_status();
      throw KernelError(fmt::format("{}: the CUDA module has no implementation of it ({}{}{})", what,
                                    cuda::to_string(status.state), status.detail.empty() ? "" : ": ", status.detail));
    }
    resolved->fn(ctx);
  };
}

}  // namespace ferry::detail
