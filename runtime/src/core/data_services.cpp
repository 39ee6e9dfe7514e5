// The core's answers to the data layer (data/data_host.hpp): a lineage
// replay runs its kernel as a CPU task runs, on the calling thread, and a
// unified root's pages come home through the CUDA module.
#include "core/data_services.hpp"

#include <chrono>
#include <optional>

#include "core/core.hpp"
#include "ferry/heap_trim.hpp"
#include "cuda_port/cuda_module.hpp"
#include "data/data_host.hpp"

namespace ferry::detail {

namespace {

class CoreDataHost final : public DataHost {
 public:
  void run_on_host(const KernelDef& kernel, KernelArgs& args, const std::string& name,
                   const std::weak_ptr<RuntimeCore>& runtime) const override {
    ExecContext context{args, name, -1, nullptr, -1, std::nullopt};
    const auto start = std::chrono::steady_clock::now();
    kernel.cpu(context);
    HeapTrim::global().released();
    if (auto core = runtime.lock())
      core->count_replay(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                             .count());
  }

  void unified_to_host(const void* data, std::size_t bytes, int device) const override {
    // A GPU used the root, so the module that made that GPU's device is loaded.
    cuda_module()->unified_to_host(data, bytes, device);
  }
};

}  // namespace

void install_data_host() noexcept {
  static const CoreDataHost host;
  set_data_host(host);
}

}  // namespace ferry::detail
