// Kernels written as CUDA C++ source and compiled with NVRTC for the GPUs
// that run them (cached in memory and on disk): when the kernel is defined,
// for every GPU of the runtime, on a thread of its own and within a time
// limit, so a heavy source neither stalls a GPU's tasks nor hides its errors
// until the first run. The same source runs on a remote GPU host: the
// runtime ships it and ferryd compiles it when the definition arrives.
//
//   auto scale = rt.cuda_kernel(R"(
//     extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
//       int i = blockIdx.x * blockDim.x + threadIdx.x;
//       if (i < n) y[i] = a * x[i];
//     })", "scale", {"y"});
//   rt.submit(scale, ferry::read(x), ferry::write(y), 2.0f, int(n));
//
// Parameters come from the entry's signature: `const T*` is read, `T*` is
// readwrite (write when named in `writes`), scalars keep their exact C type.
// Seven hidden trailing integer parameters set the launch: grid_x, grid_y,
// grid_z, block_x, block_y, block_z, shared_bytes; 0 (the default) means
// automatic: blocks of 256 threads, enough to cover the first buffer's elements.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/runtime/kernel.hpp"

namespace ferry {

// What travels to a remote host.
struct CudaSource {
  std::string source;                // CUDA C++ holding the entry, a __global__ function (extern "C" or not)
  std::string entry;                 // the kernel's name
  std::vector<std::string> options;  // extra NVRTC options, e.g. "-use_fast_math"

  friend bool operator==(const CudaSource&, const CudaSource&) = default;
};

// A launch configuration once the automatic parts are filled in.
struct CudaLaunch {
  unsigned grid[3]{0, 0, 0};
  unsigned block[3]{0, 0, 0};
  unsigned shared_bytes = 0;
};

// Parses the entry's parameter list and builds its definition (named after
// the entry). Throws UsageError naming what it could not parse: "cuda_kernel
// 'scale': parameter 2 'n' has type 'std::complex<float>', which Ferry cannot
// pass; ...". Works on builds without CUDA, whose runtimes may still ship the
// kernel to a remote GPU host; only running it locally needs NVRTC.
KernelDef make_cuda_source_kernel(CudaSource source, std::vector<std::string> writes = {});

// For a server compiling a stranger's source (ferryd): throws UsageError
// naming an option that could touch the server's files (anything not on a
// list of harmless ones: -I, --include-path, -include, --pre-include, --pch,
// --time, ...) or an include that could (an absolute path, one with "..",
// one a macro computes, also in __has_include); then adds
// --no-source-include, so NVRTC looks for includes in no folder of the
// server's (it opens an absolute path whatever the search list, hence the
// refusal). Linear in the source's size.
void confine_cuda_source(CudaSource& source);

// How long NVRTC may take for one kernel's definition (all of its GPUs).
inline constexpr std::chrono::milliseconds default_compile_limit{30000};
// How many of one client's compiles may run at once, counting those that
// overran their limit and still run.
inline constexpr unsigned default_compiles_running = 2;

// One client's compiles at definition (a runtime's own, or one ferryd
// client's): each may take `limit`, at most `most` run at once.
//
// NVRTC cannot be interrupted. A compile that overruns is waited for no
// longer (its definition fails, naming the limit) but goes on, on its own
// thread, until NVRTC returns; its result then lands in the compiler's
// cache like any other (a later definition of the same source finds it)
// and it stops counting. So however often a client retries, it keeps at
// most `most` NVRTC threads busy. Thread-safe; may be destroyed while
// compiles it started still run (they hold what they need).
class CompileBudget {
 public:
  explicit CompileBudget(std::chrono::milliseconds limit = default_compile_limit,
                         unsigned most = default_compiles_running);

  std::chrono::milliseconds limit() const noexcept { return limit_; }
  unsigned most() const noexcept { return most_; }
  unsigned running() const;  // started and not yet returned, overrun or not

  // Runs `work` on a thread of its own and waits for it at most limit().
  // Rethrows what `work` threw; throws CompileError naming `kernel` and the
  // limit when it takes longer, UsageError naming `kernel` when most()
  // compiles are running already (nothing is started then).
  void run(std::string_view kernel, std::function<void()> work);

 private:
  struct Count;
  std::chrono::milliseconds limit_;
  unsigned most_;
  std::shared_ptr<Count> count_;  // shared with the threads, which may outlive this
};

// Compiles `source` with NVRTC now, under `budget`, for each of the GPUs
// `gpus` (CUDA ordinals of this process), so that its first run there
// finds it compiled and the GPU's executor compiles nothing. Nothing
// happens when `gpus` is empty. Throws what CompileBudget::run does:
// CompileError with NVRTC's log when the source does not compile, or when
// the limit passed; UsageError when the budget is full; Error when NVRTC
// itself fails (or this build has no CUDA).
void compile_cuda_source(const CudaSource& source, const std::vector<int>& gpus, CompileBudget& budget);

}  // namespace ferry
