#include "devices/cuda/gpu_probe.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "devices/cuda/cuda_handles.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// Device memory for the probe, freed on every path out.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) { check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc (device probe)"); }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const noexcept { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Cublas {
 public:
  explicit Cublas(cudaStream_t stream) {
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed (device probe)", 0);
    cublasSetStream(handle_, stream);
  }
  ~Cublas() { cublasDestroy(handle_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

DevicePeak measure(int ordinal, const DevicePeak& sheet) {
  const CurrentDevice current(ordinal);
  const Stream stream;
  Event start(/*timing=*/true), stop(/*timing=*/true);
  // The best of a few runs after a warm-up (which pays for loading kernels).
  const auto seconds = [&](auto&& op) {
    op();
    float best_ms = 1e30f;
    for (int round = 0; round < 3; ++round) {
      start.record(stream.get());
      op();
      stop.record(stream.get());
      stop.wait();
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
      best_ms = std::min(best_ms, ms);
    }
    return static_cast<double>(best_ms) * 1e-3;
  };

  constexpr int n = 2048;  // 17 GFLOP: long enough to time, a fraction of a millisecond on a large GPU
  const std::size_t matrix = std::size_t{n} * n * sizeof(float);
  DeviceMemory a(matrix), b(matrix), c(matrix);
  for (const DeviceMemory* m : {&a, &b, &c})
    check_cuda(cudaMemsetAsync(m->get(), 0, matrix, stream.get()), "cudaMemsetAsync (device probe)");
  const Cublas blas(stream.get());
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double gemm = seconds([&] {
    const cublasStatus_t s = cublasSgemm(blas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                         static_cast<const float*>(a.get()), n, static_cast<const float*>(b.get()), n,
                                         &zero, static_cast<float*>(c.get()), n);
    if (s != CUBLAS_STATUS_SUCCESS) status = s;
  });
  if (status != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasSgemm failed (device probe)", static_cast<int>(status));

  constexpr std::size_t copy_bytes = std::size_t{64} << 20;  // well past the L2 cache
  DeviceMemory from(copy_bytes), to(copy_bytes);
  const double copy = seconds([&] {
    check_cuda(cudaMemcpyAsync(to.get(), from.get(), copy_bytes, cudaMemcpyDeviceToDevice, stream.get()),
               "cudaMemcpyAsync (device probe)");
  });

  DevicePeak peak = sheet;
  if (gemm > 0) peak.flops_per_second = 2.0 * n * n * n / gemm;
  if (copy > 0) peak.bytes_per_second = 2.0 * static_cast<double>(copy_bytes) / copy;  // read and write
  peak.measured = true;
  return peak;
}

}  // namespace

DevicePeak gpu_probe(int ordinal, const DevicePeak& sheet) {
  // Once per GPU and process: later runtimes reuse it.
  static std::mutex mutex;
  static std::map<int, DevicePeak> measured;
  std::lock_guard lock(mutex);
  if (auto it = measured.find(ordinal); it != measured.end()) return it->second;
  DevicePeak peak = sheet;
  try {
    peak = measure(ordinal, sheet);
    log().debug("cuda:{} probe: {:.1f} TFLOP/s (SGEMM), {:.0f} GB/s (device copy); data sheet {:.1f} TFLOP/s, {:.0f} GB/s",
                ordinal, peak.flops_per_second * 1e-12, peak.bytes_per_second * 1e-9, sheet.flops_per_second * 1e-12,
                sheet.bytes_per_second * 1e-9);
  } catch (const std::exception& e) {
    cudaGetLastError();  // a failed probe leaves nothing behind for the device's own calls
    log().warn("cuda:{}: the device probe failed ({}); first estimates use the data sheet's rates", ordinal, e.what());
  }
  measured.emplace(ordinal, peak);
  return peak;
}

}  // namespace ferry::detail
