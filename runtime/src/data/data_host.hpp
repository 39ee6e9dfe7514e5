// What the data layer asks of the floors above it, and no more: run a lost
// task's kernel again on the host (lineage replay), and bring a unified
// root's pages back from a GPU. The core answers (core/data_services.cpp); the
// data layer builds no kernel context and calls no CUDA module itself
// (docs/architecture.md, "Floors inside the runtime").
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "ferry/runtime/kernel.hpp"

namespace ferry::detail {

class RuntimeCore;

class DataHost {
 public:
  // Runs `kernel`'s CPU variant on this thread on `args` (buffers filled in),
  // as task `name`, for `runtime` (which counts the work done again).
  virtual void run_on_host(const KernelDef& kernel, KernelArgs& args, const std::string& name,
                           const std::weak_ptr<RuntimeCore>& runtime) const = 0;
  // Moves the pages of `bytes` at `data`, last used by GPU `device`, to the
  // host; returns once they are there.
  virtual void unified_to_host(const void* data, std::size_t bytes, int device) const = 0;

 protected:
  ~DataHost() = default;
};

// The one host, set by the core before it makes a buffer and never unset:
// it lives as long as the process, so a buffer that outlives its runtime may still ask.
inline std::atomic<const DataHost*> installed_data_host{nullptr};
inline void set_data_host(const DataHost& host) noexcept { installed_data_host.store(&host, std::memory_order_release); }
inline const DataHost& data_host() noexcept { return *installed_data_host.load(std::memory_order_acquire); }

}  // namespace ferry::detail
