// The elementwise functions the map kernel knows, shared by its CPU and CUDA
// variants so both accept and refuse the same names (plain enough for nvcc).
#pragma once

#include <string>

namespace ferry::kernels {

enum class MapOp { copy, neg, abs, sqrt, exp, log, square, relu, sigmoid, scale };

// Throws UsageError naming the op and listing the ones map knows.
MapOp parse_map_op(const std::string& name);

}  // namespace ferry::kernels
