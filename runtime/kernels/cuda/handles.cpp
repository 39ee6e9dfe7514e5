#include "cuda/handles.hpp"

#include <fmt/format.h>

#include <compare>
#include <map>
#include <mutex>

#include "ferry/error.hpp"

namespace ferry::kernels::cuda {
namespace {

struct Key {
  int device;
  void* stream;
  friend auto operator<=>(const Key&, const Key&) = default;
};

// Creation happens under the lock: it is rare (once per stream) and two
// threads must not both create a handle for one stream.
template <typename Handle>
class HandleCache {
 public:
  template <typename Create>
  Handle get(Key key, Create create) {
    std::lock_guard lock(mutex_);
    auto it = handles_.find(key);
    if (it != handles_.end()) return it->second;
    const Handle handle = create();
    handles_.emplace(key, handle);
    return handle;
  }

  template <typename Destroy>
  void release(Key key, Destroy destroy) {
    std::lock_guard lock(mutex_);
    auto it = handles_.find(key);
    if (it == handles_.end()) return;
    destroy(it->second);
    handles_.erase(it);
  }

 private:
  std::mutex mutex_;
  std::map<Key, Handle> handles_;
};

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
  return cublas_cache().get(Key{ctx.device, ctx.stream}, [&] {
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    // The default math mode stays: no TF32 for float gemm, so results match the CPU's.
    const cublasStatus_t status = cublasSetStream(handle, stream_of(ctx));
    if (status != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(handle);
      check_cublas(status, "cublasSetStream");
    }
    return handle;
  });
}

cusolverDnHandle_t cusolver_handle(const ExecContext& ctx) {
  return cusolver_cache().get(Key{ctx.device, ctx.stream}, [&] {
    cusolverDnHandle_t handle = nullptr;
    check_cusolver(cusolverDnCreate(&handle), "cusolverDnCreate");
    const cusolverStatus_t status = cusolverDnSetStream(handle, stream_of(ctx));
    if (status != CUSOLVER_STATUS_SUCCESS) {
      (void)cusolverDnDestroy(handle);
      check_cusolver(status, "cusolverDnSetStream");
    }
    return handle;
  });
}

// Teardown: a failure to destroy leaves nothing to recover, so it is not reported.
void release_handles(int device, void* stream) {
  cublas_cache().release(Key{device, stream}, [](cublasHandle_t h) { (void)cublasDestroy(h); });
  cusolver_cache().release(Key{device, stream}, [](cusolverDnHandle_t h) { (void)cusolverDnDestroy(h); });
}

}  // namespace ferry::kernels::cuda
