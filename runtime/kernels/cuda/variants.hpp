// The CUDA variants of the built-in kernels (CUDA builds only). Each takes
// the same arguments as its CPU twin in cpu/, with device pointers, enqueues
// on ctx.stream and returns; dot, nrm2, sum (scalar results), potrf, gesdd,
// syevd and geqrf (their info flags) synchronize the stream.
#pragma once

#include <string_view>

#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels::cuda {

// The variant of the built-in called `name`; an empty KernelFn when none.
KernelFn variant(std::string_view name);

void axpy(ExecContext& ctx);
void scal(ExecContext& ctx);
void dot(ExecContext& ctx);
void nrm2(ExecContext& ctx);
void gemm(ExecContext& ctx);
void trsm(ExecContext& ctx);
void syrk(ExecContext& ctx);
void potrf(ExecContext& ctx);
void fill(ExecContext& ctx);
void copy(ExecContext& ctx);
void map(ExecContext& ctx);
void sum(ExecContext& ctx);
void gesdd(ExecContext& ctx);
void syevd(ExecContext& ctx);
void geqrf(ExecContext& ctx);

}  // namespace ferry::kernels::cuda
