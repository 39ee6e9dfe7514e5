// The fused kernel's operations as loops over one block: each instruction
// resolves once per call to a function that runs a whole block, so the
// interpreter's dispatch costs one indirect call per operation and block,
// and every loop body is simple enough for the compiler to vectorise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fused_program.hpp"

namespace ferry::kernels::fused {

// out[i] = op(in[0][i], in[1][i], ...) for i < n.
using OpFn = void (*)(void* out, const void* const* in, std::size_t n, const Instr& instr);

// For every instruction but load, constant and index.
OpFn resolve(const Instr& instr);
// Converts n elements; to u8 is a truth test (x != 0), as u8 holds bools.
OpFn cast_fn(DType from, DType to);

// y[i] = fold(y[i], v[i]) for i < n (stride 1), or y[0] folded with all of v.
using FoldFn = void (*)(void* y, const void* v, std::size_t n);
FoldFn fold_fn(Fold fold, DType type, bool into_one);
// Fills n elements at y with the fold's identity (0, 1, +max, -max).
void fill_identity(Fold fold, DType type, void* y, std::size_t n);

// The counter-based generators: the same counter and seed give the same
// number on every host (splitmix64; Box-Muller for the normal).
double uniform(std::uint64_t seed, std::int64_t counter);
double normal(std::uint64_t seed, std::int64_t counter);

}  // namespace ferry::kernels::fused
