// How every message names a task: "task 'x' (kernel y)", so logs and errors
// from submission, devices and coherence read alike and can be grepped.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace ferry::detail {

inline std::string task_label(std::string_view task, std::string_view kernel) {
  return fmt::format("task '{}' (kernel {})", task, kernel);
}

}  // namespace ferry::detail
