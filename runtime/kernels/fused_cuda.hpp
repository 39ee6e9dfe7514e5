// CUDA C++ source for a fused elementwise program (fused_program.hpp): the
// same expression the CPU interpreter runs, as one thread per element, to
// be compiled by NVRTC where the GPU is (ferry::Runtime::cuda_kernel ships
// it to a GPU ferryd with define_kernel).
#pragma once

#include <string>
#include <vector>

#include "ferry/runtime/dtype.hpp"

namespace ferry::kernels {

// An extern "C" __global__ function `entry(long long n, Y* y, const X0* x0,
// ...)` computing y[e] for e < n = the program's element count, with the
// program's dimensions, strides and offsets as constants, for a 1-D launch.
// A program that folds (f=...) folds into y atomically (into one element:
// one atomic per block, after a warp and block fold) and gets a second entry,
// `entry_identity(long long n, Y* y)`, that fills y's n elements with the
// fold's identity: launch it on y first. Throws UsageError for a bad program.
std::string fused_cuda_source(const std::string& program, const std::vector<DType>& inputs, DType y,
                              const std::string& entry);

}  // namespace ferry::kernels
