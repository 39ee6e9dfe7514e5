#include "cuda/handles.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "cuda/handle_cache.hpp"
#include "ferry/detail/cuda_check.hpp"
#include "ferry/error.hpp"

namespace ferry::kernels::cuda {
namespace {

// Never destroyed as a whole: at exit the CUDA runtime may already be torn down, and
// destroying a handle then can crash; the driver reclaims everything anyway.
HandleCache<cublasHandle_t>& cublas_cache() {
  static auto* cache = new HandleCache<cublasHandle_t>;
  return *cache;
}
HandleCache<cusolverDnHandle_t>& cusolver_cache() {
  static auto* cache = new HandleCache<cusolverDnHandle_t>;
  return *cache;
}

// cuSOLVER has no status-name function.
const char* cusolver_status_name(cusolverStatus_t status) {
  switch (status) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_ZERO_PIVOT: return "CUSOLVER_STATUS_ZERO_PIVOT";
    case CUSOLVER_STATUS_INVALID_LICENSE: return "CUSOLVER_STATUS_INVALID_LICENSE";
    default: return "an unnamed cuSOLVER status";
  }
}

// CUDA's id for the stream: what tells a new stream from a destroyed one
// that had the same address.
std::uint64_t stream_id(const ExecContext& ctx) {
  unsigned long long id = 0;
  detail::check_cuda(cudaStreamGetId(stream_of(ctx), &id), "cudaStreamGetId");
  return id;
}

void destroy_cublas(cublasHandle_t h) { (void)cublasDestroy(h); }
void destroy_cusolver(cusolverDnHandle_t h) { (void)cusolverDnDestroy(h); }

}  // namespace

void check_cublas(cublasStatus_t status, const char* call, std::source_location where) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string what = fmt::format("{} failed: {} ({}) at {}:{}", call, cublasGetStatusName(status),
                                       cublasGetStatusString(status), where.file_name(), where.line());
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(what, 0);
  throw CudaError(what, static_cast<int>(status));
}

void check_cusolver(cusolverStatus_t status, const char* call, std::source_location where) {
  if (status == CUSOLVER_STATUS_SUCCESS) return;
  const std::string what = fmt::format("{} failed: {} ({}) at {}:{}", call, cusolver_status_name(status),
                                       static_cast<int>(status), where.file_name(), where.line());
  if (status == CUSOLVER_STATUS_ALLOC_FAILED) throw OutOfMemory(what, 0);
  throw CudaError(what, static_cast<int>(status));
}

cublasHandle_t cublas_handle(const ExecContext& ctx) {
  return cublas_cache().get(StreamKey{ctx.device, ctx.stream}, stream_id(ctx), [&] {
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    // The default math mode stays: no TF32 for float gemm, so results match the CPU's.
    const cublasStatus_t status = cublasSetStream(handle, stream_of(ctx));
    if (status != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(handle);
      check_cublas(status, "cublasSetStream");
    }
    return handle;
  }, destroy_cublas);
}

cusolverDnHandle_t cusolver_handle(const ExecContext& ctx) {
  return cusolver_cache().get(StreamKey{ctx.device, ctx.stream}, stream_id(ctx), [&] {
    cusolverDnHandle_t handle = nullptr;
    check_cusolver(cusolverDnCreate(&handle), "cusolverDnCreate");
    const cusolverStatus_t status = cusolverDnSetStream(handle, stream_of(ctx));
    if (status != CUSOLVER_STATUS_SUCCESS) {
      (void)cusolverDnDestroy(handle);
      check_cusolver(status, "cusolverDnSetStream");
    }
    return handle;
  }, destroy_cusolver);
}

// Teardown: a failure to destroy leaves nothing to recover, so it is not reported.
void release_handles(int device, void* stream) {
  cublas_cache().release(StreamKey{device, stream}, destroy_cublas);
  cusolver_cache().release(StreamKey{device, stream}, destroy_cusolver);
}

}  // namespace ferry::kernels::cuda
