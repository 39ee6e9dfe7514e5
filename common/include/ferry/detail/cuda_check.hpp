// Only for the CUDA module's translation units (libferry_cuda.so, which
// defines it in runtime/src/devices/cuda/module.cpp): turns a failed CUDA
// runtime call into ferry::CudaError naming the call and its place. Not
// installed: it names CUDA types.
#pragma once

#include <cuda_runtime_api.h>

#include <source_location>

namespace ferry::detail {

void check_cuda(cudaError_t status, const char* call,
                std::source_location where = std::source_location::current());

}  // namespace ferry::detail
