// Whether this process can use CUDA. Safe to call on any build and any
// machine: without the toolkit at build time or a driver at run time it
// reports zero devices and logs the reason once.
#pragma once

#include <cstddef>
#include <string>

namespace ferry::cuda {

int device_count();

// Why device_count() is zero ("built without CUDA", "no CUDA driver: ..."),
// or an empty string when devices exist.
const std::string& unavailable_reason();

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

// Throws UsageError for an ordinal outside [0, device_count()).
DeviceInfo device_info(int ordinal);

}  // namespace ferry::cuda
