// Element types a buffer can hold (ferry/dtype.hpp), and their NumPy names.
#pragma once

#include "ferry/dtype.hpp"

namespace ferry {

// NumPy's name for the type ("float32", "uint8", "bool", "complex64"):
// the bindings' name lookup and the runtime's messages share it.
const char* to_string(DType type) noexcept;

}  // namespace ferry
