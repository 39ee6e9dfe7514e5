// The parameter list of a CUDA kernel, read from its source, and what
// follows from it: which buffers and scalars a call takes, the exact bytes
// each argument is passed as, and the launch configuration. Built on every
// build: a runtime without CUDA still checks calls it ships to a remote GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/dtype.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::detail {

// A scalar parameter's C type, or what a pointer parameter points at.
enum class CType : std::uint8_t { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64, boolean, void_ };

std::size_t size_of(CType type) noexcept;
const char* to_string(CType type) noexcept;  // "int", "unsigned long long", ...
bool is_real(CType type) noexcept;
// The buffer element types a pointer to `type` accepts; empty for void* (any).
// Unsigned pointees take the signed type of their width, whose bits they share.
std::vector<DType> buffer_dtypes(CType pointee);

struct CudaParam {
  std::string name;      // as written; "argN" (1-based) when the source leaves it unnamed
  std::string spelling;  // the type as written, for messages
  bool pointer = false;
  bool const_pointee = false;  // const T*: the kernel only reads it
  CType type = CType::i32;     // the scalar's type, or the pointee's
};

struct CudaSignature {
  std::string entry;
  std::vector<CudaParam> params;
};

// Finds the __global__ function `entry` in `source` (comments, strings and
// preprocessor lines skipped) and reads its parameters. Throws UsageError
// "cuda_kernel 'entry': ..." naming what it cannot use.
CudaSignature parse_cuda_signature(std::string_view source, std::string_view entry);

// The hidden integer parameters after the entry's own, in this order.
inline constexpr std::array<const char*, 7> launch_param_names = {"grid_x",  "grid_y",  "grid_z",      "block_x",
                                                                  "block_y", "block_z", "shared_bytes"};
inline constexpr unsigned default_block = 256;

// The launch for checked arguments (the entry's, then the seven launch
// values): zeros become automatic values. Throws UsageError naming the
// argument when a value is out of CUDA's range.
CudaLaunch resolve_launch(const CudaSignature& signature, const KernelArgs& args);

// Throws UsageError when a scalar does not fit its C type or a buffer is a
// strided view (a kernel gets a bare pointer, so rows must be packed).
void check_cuda_arguments(const CudaSignature& signature, const KernelArgs& args);

// The arguments as cudaLaunchKernel takes them: one slot per parameter
// holding its exact C representation (low bytes first), and a pointer to
// each slot. Moving keeps the pointers valid; copying would not.
struct PackedArguments {
  std::vector<std::uint64_t> slots;
  std::vector<void*> pointers;
  PackedArguments() = default;
  PackedArguments(PackedArguments&&) noexcept = default;
  PackedArguments& operator=(PackedArguments&&) noexcept = default;
  PackedArguments(const PackedArguments&) = delete;
  PackedArguments& operator=(const PackedArguments&) = delete;
};
PackedArguments pack_arguments(const CudaSignature& signature, const KernelArgs& args);

}  // namespace ferry::detail
