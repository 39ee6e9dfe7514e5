// Whether this process can use CUDA. Safe to call on any build and any
// machine: without the toolkit at build time, without the CUDA module
// (libferry_cuda.so) or without a driver at run time it reports zero devices
// and logs the reason once. The first call loads the module; a process that
// never asks (a runtime with gpus = "none") never loads it.
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

// The CUDA module: every CUDA library Ferry uses is linked into
// libferry_cuda.so, loaded at run time from $FERRY_CUDA_MODULE when set,
// else from beside libferry_common.so; the core libraries link none.
struct ModuleStatus {
  enum class State { loaded, not_built, not_found, load_error };
  State state = State::not_built;
  std::string path;    // where it was looked for (or loaded from); empty when not built
  std::string detail;  // why not: the missing path, dlerror()'s text, a version mismatch
};

// Loads the module on first call (once per process).
const ModuleStatus& module_status();
// "loaded", "not built", "not found", "load error".
const char* to_string(ModuleStatus::State state) noexcept;

}  // namespace ferry::cuda
