// Only for translation units built with FERRY_WITH_CUDA: turns a failed CUDA
// runtime call into ferry::CudaError naming the call and its place.
#pragma once

#include <cuda_runtime_api.h>

#include <source_location>

namespace ferry::detail {

void check_cuda(cudaError_t status, const char* call,
                std::source_location where = std::source_location::current());

}  // namespace ferry::detail
