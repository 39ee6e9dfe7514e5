#include "ferry/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ferry {

void throw_system_error(const char* call, int err, std::source_location where) {
  throw Error(fmt::format("{} failed: {} ({}:{})", call, std::strerror(err), where.file_name(), where.line()));
}

}  // namespace ferry
