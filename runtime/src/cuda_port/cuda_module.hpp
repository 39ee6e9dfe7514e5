// The runtime's half of the CUDA module's interface: everything the core
// asks of CUDA goes through this class, implemented in libferry_cuda.so
// (devices/cuda/module.cpp) and reached through cuda_module(). The core
// (core.cpp, runtime.cpp, the kernel registry, CUDA source kernels, unified
// buffers, the pinned pool) includes this header and no CUDA header; the
// module links cudart, cuBLAS, cuSOLVER and NVRTC. The driver half (probe,
// page-locked host memory) is common's ferry/detail/cuda_driver.hpp.
//
// Both halves are C++ across two libraries of one build: the loader refuses
// a module of another Ferry version, so the layout below may change freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ferry/allocator/memory_resource.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/kernel.hpp"
#include "ferry/runtime/place.hpp"

namespace ferry::detail {

class Device;
class DeviceHost;
struct BufferState;
struct CudaSignature;

// What the core sets for one local GPU (Runtime::Options, per GPU).
struct GpuOptions {
  int ordinal = 0;
  std::size_t memory_limit = 0;  // 0: the device's free memory less a margin
  unsigned streams = 2;
  std::size_t chunk_bytes = std::size_t{4} << 20;
  unsigned slots = 4;
};

// What the core reports about one of the module's devices.
struct GpuFacts {
  int ordinal = -1;
  std::size_t bytes_to_device = 0;
  std::size_t bytes_from_device = 0;
  std::size_t stream_ordered = 0;
  std::size_t bytes_from_peers = 0;
  std::string description;  // model, memory bound and use, streams
};

class CudaModule {
 public:
  // A local GPU as a device and memory node; throws Error when it cannot start.
  virtual std::unique_ptr<Device> make_device(DeviceHost& runtime, DeviceId id, MemoryNodeId node,
                                              const GpuOptions& options) const = 0;
  // Facts about `device` when it is one of the module's GPUs, else false.
  virtual bool facts(const Device& device, GpuFacts& out) const = 0;
  // Device data at `source` becomes the view's modified replica on `device`
  // (one of the module's GPUs, else false and nothing happens).
  virtual bool adopt(Device& device, const BufferState& view, const void* source) const = 0;

  // The CUDA variant of the built-in kernel `name`; empty when it has none.
  virtual KernelFn builtin_variant(std::string_view name) const = 0;
  // The `cuda` implementation of a kernel from CUDA source (NVRTC).
  virtual KernelFn nvrtc_launcher(std::shared_ptr<const CudaSource> source,
                                  std::shared_ptr<const CudaSignature> signature) const = 0;
  // Compiles `source` for GPU `device`'s architecture into the cache the
  // launcher reads; throws as NvrtcCompiler::compile does. Blocks for as
  // long as NVRTC takes: callers bound it (CompileBudget).
  virtual void compile_nvrtc(const CudaSource& source, int device) const = 0;

  // Managed memory for unified buffers on GPU `device` (UnifiedPool).
  virtual std::shared_ptr<MemoryResource> unified_memory(int device) const = 0;
  // Migrates the pages of `bytes` at `data` back to the host; returns once they are there.
  virtual void unified_to_host(const void* data, std::size_t bytes, int device) const = 0;

 protected:
  ~CudaModule() = default;
};

// The loaded module's runtime half, or nullptr when no module is loaded
// (ferry::cuda::module_status() says why). Loads the module on first use:
// call it only where a GPU is wanted.
const CudaModule* cuda_module();

// The names of the built-in kernels that have a CUDA variant. The registry
// attaches a forwarder to each without loading the module (a CPU-only
// runtime never does); the module's own test checks this list against it.
inline constexpr std::string_view cuda_builtin_variants[] = {"axpy", "scal", "dot",  "nrm2", "gemm", "trsm",
                                                             "syrk", "potrf", "fill", "copy", "map",  "sum",
                                                             "gesdd", "syevd", "geqrf"};

// A `cuda` implementation that asks the module for the real one on its
// first call (through `make`), then calls that; throws KernelError naming
// `what` when the module is not loaded or has none.
KernelFn lazy_cuda_kernel(std::string what, std::function<KernelFn(const CudaModule&)> make);

}  // namespace ferry::detail
