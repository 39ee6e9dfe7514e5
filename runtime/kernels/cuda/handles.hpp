// cuBLAS and cuSOLVER handles for the CUDA variants, one of each per
// (device, stream), and the checks that turn their status codes into
// ferry errors naming the call. CUDA builds only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <source_location>

#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels::cuda {

inline cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Created on first use on ctx.device (which the executor made current) and
// bound to ctx.stream once; never reconfigured afterwards, so tasks on other
// threads may share it. Kept while that stream lives (handle_cache.hpp: a
// new stream at a destroyed one's address gets a handle of its own).
cublasHandle_t cublas_handle(const ExecContext& ctx);
cusolverDnHandle_t cusolver_handle(const ExecContext& ctx);

// For an executor about to destroy a stream: destroys the handles made for
// it (each holds device workspace). The stream's work must be finished.
void release_handles(int device, void* stream);

// ALLOC_FAILED becomes OutOfMemory; any other failure CudaError, whose code()
// is then the library's status value rather than a cudaError_t.
void check_cublas(cublasStatus_t status, const char* call, std::source_location where = std::source_location::current());
void check_cusolver(cusolverStatus_t status, const char* call,
                    std::source_location where = std::source_location::current());

}  // namespace ferry::kernels::cuda
