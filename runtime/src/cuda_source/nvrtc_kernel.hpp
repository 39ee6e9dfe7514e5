// The `cuda` implementation of a CUDA source kernel: compiles the source for
// the executing GPU (NvrtcCompiler's caches), loads it once per device with
// the CUDA runtime's library API (no libcuda link, so machines without a
// driver still load Ferry) and launches it on the task's stream.
#pragma once

#include <memory>

#include "cuda_source/cuda_signature.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::detail {

KernelFn make_nvrtc_launcher(std::shared_ptr<const CudaSource> source, std::shared_ptr<const CudaSignature> signature);

}  // namespace ferry::detail
