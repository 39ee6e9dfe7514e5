// A call's arguments against the kernel's signature: checked, resolved to
// a launch configuration, and packed as cudaLaunchKernel takes them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <variant>

#include "cuda_source/cuda_signature.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

std::string argument(std::size_t index, std::string_view name) {
  return fmt::format("argument {} '{}'", index + 1, name);
}

// Whether a checked scalar fits the parameter's C type.
bool fits(CType type, const ScalarValue& value) {
  if (is_real(type)) {
    const double d = std::get<double>(value);
    return type == CType::f64 || !std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max();
  }
  const std::int64_t n = std::get<std::int64_t>(value);
  switch (type) {
    case CType::i8: return n >= INT8_MIN && n <= INT8_MAX;
    case CType::u8: return n >= 0 && n <= UINT8_MAX;
    case CType::i16: return n >= INT16_MIN && n <= INT16_MAX;
    case CType::u16: return n >= 0 && n <= UINT16_MAX;
    case CType::i32: return n >= INT32_MIN && n <= INT32_MAX;
    case CType::u32: return n >= 0 && n <= static_cast<std::int64_t>(UINT32_MAX);
    case CType::boolean: return n == 0 || n == 1;
    case CType::i64: return true;
    case CType::u64: return n >= 0;  // what a call can express: scalars travel as int64
    default: return false;
  }
}

// The launch values after the entry's parameters, checked and defaulted.
struct LaunchValues {
  std::int64_t grid[3], block[3], shared;
};

LaunchValues launch_values(const CudaSignature& signature, const KernelArgs& args) {
  const std::size_t base = signature.params.size();
  std::int64_t v[launch_param_names.size()];
  for (std::size_t k = 0; k < launch_param_names.size(); ++k) {
    v[k] = base + k < args.size() ? args.integer(base + k) : 0;
    if (v[k] < 0)
      throw UsageError(fmt::format("{} is {}; launch values are 0 (automatic) or positive",
                                   argument(base + k, launch_param_names[k]), v[k]));
  }
  return {{v[0], v[1], v[2]}, {v[3], v[4], v[5]}, v[6]};
}

}  // namespace

void check_cuda_arguments(const CudaSignature& signature, const KernelArgs& args) {
  for (std::size_t i = 0; i < signature.params.size() && i < args.size(); ++i) {
    const CudaParam& p = signature.params[i];
    const Arg& arg = args[i];
    if (p.pointer) {
      const BufferArg& b = std::get<BufferArg>(arg);
      if (!b.contiguous())
        throw UsageError(fmt::format(
            "{} is a {} x {} view whose rows are {} elements apart; a CUDA kernel gets a bare pointer, so pass a "
            "buffer (or a view of whole rows) whose rows are packed",
            argument(i, p.name), b.rows, b.cols, b.ld));
    } else if (const auto& scalar = std::get<ScalarValue>(arg); !fits(p.type, scalar)) {
      const auto shown = std::holds_alternative<double>(scalar) ? fmt::format("{}", std::get<double>(scalar))
                                                                : fmt::format("{}", std::get<std::int64_t>(scalar));
      throw UsageError(fmt::format("{} is {}, which does not fit in the kernel's {}", argument(i, p.name), shown,
                                   p.spelling));
    }
  }
  resolve_launch(signature, args);
}

CudaLaunch resolve_launch(const CudaSignature& signature, const KernelArgs& args) {
  const LaunchValues v = launch_values(signature, args);
  const std::size_t base = signature.params.size();
  const auto too_big = [&](std::size_t k, std::int64_t limit) {
    return UsageError(fmt::format("{} is {}; CUDA allows at most {}", argument(base + k, launch_param_names[k]),
                                  k < 3 ? v.grid[k] : k < 6 ? v.block[k - 3] : v.shared, limit));
  };
  CudaLaunch launch;
  const std::int64_t block_limits[3] = {1024, 1024, 64};
  const bool auto_block = v.block[0] == 0 && v.block[1] == 0 && v.block[2] == 0;
  for (std::size_t d = 0; d < 3; ++d) {
    if (v.block[d] > block_limits[d]) throw too_big(3 + d, block_limits[d]);
    launch.block[d] = auto_block ? (d == 0 ? default_block : 1u) : static_cast<unsigned>(std::max<std::int64_t>(v.block[d], 1));
  }
  const std::uint64_t threads = std::uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
  if (threads > 1024)
    throw UsageError(fmt::format("the block has {} x {} x {} = {} threads; CUDA allows at most 1024", launch.block[0],
                                 launch.block[1], launch.block[2], threads));

  const std::int64_t grid_limits[3] = {2147483647, 65535, 65535};
  for (std::size_t d = 0; d < 3; ++d)
    if (v.grid[d] > grid_limits[d]) throw too_big(d, grid_limits[d]);
  if (v.grid[0] == 0 && v.grid[1] == 0 && v.grid[2] == 0) {
    // Automatic: one thread per element of the first buffer.
    const auto first = std::find_if(signature.params.begin(), signature.params.end(),
                                    [](const CudaParam& p) { return p.pointer; });
    if (first == signature.params.end())
      throw UsageError(fmt::format("kernel {} takes no buffer to size its grid by; pass {} (and {})", signature.entry,
                                   launch_param_names[0], launch_param_names[3]));
    const std::size_t index = static_cast<std::size_t>(first - signature.params.begin());
    const std::uint64_t elements = args.buffer(index).elements();
    const std::uint64_t blocks = std::max<std::uint64_t>(1, (elements + threads - 1) / threads);
    if (blocks > static_cast<std::uint64_t>(grid_limits[0]))
      throw UsageError(fmt::format("{} has {} elements, more than one launch of {}-thread blocks covers; pass {}",
                                   argument(index, first->name), elements, threads, launch_param_names[0]));
    launch.grid[0] = static_cast<unsigned>(blocks);
    launch.grid[1] = launch.grid[2] = 1;
  } else {
    for (std::size_t d = 0; d < 3; ++d) launch.grid[d] = static_cast<unsigned>(std::max<std::int64_t>(v.grid[d], 1));
  }

  // Above what any GPU so far offers a block (227 KiB on Hopper); the device's own limit applies at launch.
  constexpr std::int64_t max_shared = 256 * 1024;
  if (v.shared > max_shared) throw too_big(6, max_shared);
  launch.shared_bytes = static_cast<unsigned>(v.shared);
  return launch;
}

PackedArguments pack_arguments(const CudaSignature& signature, const KernelArgs& args) {
  PackedArguments packed;
  packed.slots.assign(signature.params.size(), 0);
  for (std::size_t i = 0; i < signature.params.size(); ++i) {
    const CudaParam& p = signature.params[i];
    void* slot = &packed.slots[i];
    if (p.pointer) {
      void* data = args.buffer(i).data;
      std::memcpy(slot, &data, sizeof data);
      continue;
    }
    const auto put = [slot](auto value) { std::memcpy(slot, &value, sizeof value); };
    switch (p.type) {
      case CType::f32: put(static_cast<float>(args.real(i))); break;
      case CType::f64: put(args.real(i)); break;
      case CType::i8: put(static_cast<std::int8_t>(args.integer(i))); break;
      case CType::u8: put(static_cast<std::uint8_t>(args.integer(i))); break;
      case CType::boolean: put(static_cast<bool>(args.integer(i))); break;
      case CType::i16: put(static_cast<std::int16_t>(args.integer(i))); break;
      case CType::u16: put(static_cast<std::uint16_t>(args.integer(i))); break;
      case CType::i32: put(static_cast<std::int32_t>(args.integer(i))); break;
      case CType::u32: put(static_cast<std::uint32_t>(args.integer(i))); break;
      case CType::i64: put(args.integer(i)); break;
      case CType::u64: put(static_cast<std::uint64_t>(args.integer(i))); break;
      case CType::void_: throw Error(fmt::format("kernel {}: parameter {} is void", signature.entry, i + 1));
    }
  }
  packed.pointers.reserve(packed.slots.size());
  for (auto& slot : packed.slots) packed.pointers.push_back(&slot);
  return packed;
}

}  // namespace ferry::detail
