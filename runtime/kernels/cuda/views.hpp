// BufferArgs as the Views the own kernels take. As on the CPU (Stretches in
// cpu/support.hpp), a call whose buffers are all contiguous is one long row;
// otherwise each buffer keeps its rows and its own ld.
#pragma once

#include <algorithm>
#include <initializer_list>

#include "cuda/launch.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry::kernels::cuda {

inline bool all_contiguous(std::initializer_list<const BufferArg*> buffers) {
  return std::all_of(buffers.begin(), buffers.end(), [](const BufferArg* b) { return b->contiguous(); });
}

template <typename T>
View<T> view(const BufferArg& b, bool as_one_row) {
  if (as_one_row) return {b.as<T>(), 1, b.elements(), b.elements()};
  return {b.as<T>(), b.rows, b.cols, b.ld};
}

}  // namespace ferry::kernels::cuda
