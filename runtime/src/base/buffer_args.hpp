// The buffers among a call's arguments. A task (and a prepared task, and a
// lineage entry) keeps its arguments in call order plus the positions of the
// buffers among them; this is the one way to reach the i-th buffer.
#pragma once

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "ferry/runtime/kernel.hpp"

namespace ferry::detail {

inline BufferArg& buffer_arg(KernelArgs& args, std::span<const std::uint32_t> positions, std::size_t i) {
  return std::get<BufferArg>(args.items[positions[i]]);
}
inline const BufferArg& buffer_arg(const KernelArgs& args, std::span<const std::uint32_t> positions, std::size_t i) {
  return std::get<BufferArg>(args.items[positions[i]]);
}

}  // namespace ferry::detail
