// Kernels written as CUDA C++ source and compiled at run time with NVRTC for
// the GPU that runs them (cached in memory and on disk). The same source
// runs on a remote GPU host: the runtime ships it and ferryd compiles it.
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

#include <string>
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

}  // namespace ferry
