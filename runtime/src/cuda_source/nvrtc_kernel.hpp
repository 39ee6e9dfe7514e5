// The `cuda` implementation of a CUDA source kernel: finds the source
// compiled for the executing GPU in NvrtcCompiler's caches (put there when
// the kernel was defined; compiled here only for a kernel that was not,
// such as one added to a runtime with no GPU then), loads it once per device with
// the CUDA runtime's library API (no libcuda link, so machines without a
// driver still load Ferry) and launches it on the task's stream.
#pragma once

#include <memory>

#include "cuda_source/cuda_signature.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::detail {

KernelFn make_nvrtc_launcher(std::shared_ptr<const CudaSource> source, std::shared_ptr<const CudaSignature> signature);

// Compiles `source` for GPU `device`'s architecture into the shared
// compiler's caches, where the launcher finds it.
void compile_for_device(const CudaSource& source, int device);

}  // namespace ferry::detail
