// The CUDA probe and the loader of the CUDA module. The core libraries link
// no CUDA library: everything CUDA lives in libferry_cuda.so, opened here
// with dlopen the first time someone asks, so a binary or wheel built with
// CUDA starts on a machine that has neither the toolkit nor a driver.
#include "ferry/cuda_probe.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ferry/config.hpp"
#include "ferry/detail/cuda_driver.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry {

namespace {

constexpr const char* module_file = "libferry_cuda.so";
// An object of this library, whose address dladdr() maps back to its file.
const char anchor = 0;

struct Module {
  cuda::ModuleStatus status;
  void* handle = nullptr;
  const detail::CudaDriver* driver = nullptr;
};

// Where the module is looked for: $FERRY_CUDA_MODULE, else beside this
// library (lib/ of an install tree, ferry/lib of a wheel, and the build tree,
// where CMake puts the module beside libferry_common.so).
std::filesystem::path module_path() {
  if (const char* path = std::getenv("FERRY_CUDA_MODULE"); path != nullptr && *path != '\0') return path;
  Dl_info info{};
  if (dladdr(&anchor, &info) != 0 && info.dli_fname != nullptr)
    return std::filesystem::path(info.dli_fname).parent_path() / module_file;
  return module_file;
}

std::string dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

Module open_module() {
  Module m;
  if (!config::with_cuda) {
    m.status.detail = "this build of Ferry has no CUDA support (FERRY_WITH_CUDA=OFF)";
    return m;
  }
  const std::filesystem::path path = module_path();
  m.status.path = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    m.status.state = cuda::ModuleStatus::State::not_found;
    m.status.detail = std::getenv("FERRY_CUDA_MODULE") != nullptr && *std::getenv("FERRY_CUDA_MODULE") != '\0'
                          ? fmt::format("FERRY_CUDA_MODULE names {}, which does not exist", m.status.path)
                          : fmt::format("{} does not exist", m.status.path);
    return m;
  }
  // RTLD_LOCAL: nothing of CUDA's leaks into the global namespace of a host
  // process (Python with PyTorch loaded, say) beyond what the module uses.
  void* handle = dlopen(m.status.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    m.status.state = cuda::ModuleStatus::State::load_error;
    m.status.detail = dl_error();
    return m;
  }
  using VersionFn = const char* (*)();
  using DriverFn = const detail::CudaDriver* (*)();
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, FERRY_CUDA_MODULE_VERSION_SYMBOL));
  auto driver = reinterpret_cast<DriverFn>(dlsym(handle, FERRY_CUDA_MODULE_DRIVER_SYMBOL));
  if (version == nullptr || driver == nullptr) {
    m.status.state = cuda::ModuleStatus::State::load_error;
    m.status.detail = fmt::format("{} is not a Ferry CUDA module: {}", m.status.path, dl_error());
  } else if (std::strcmp(version(), config::version) != 0) {
    // The interface is C++ between libraries of one build: another version's
    // module may lay its classes out differently.
    m.status.state = cuda::ModuleStatus::State::load_error;
    m.status.detail =
        fmt::format("{} is from Ferry {}, this core is Ferry {}", m.status.path, version(), config::version);
  } else {
    m.status.state = cuda::ModuleStatus::State::loaded;
    m.handle = handle;
    m.driver = driver();
    return m;
  }
  dlclose(handle);
  return m;
}

const Module& module() {
  // Never unloaded: CUDA's own atexit handlers and the runtime's objects
  // from the module may outlive any owner we could give it.
  static const Module loaded = [] {
    Module m = open_module();
    if (m.status.state == cuda::ModuleStatus::State::loaded)
      log().debug("CUDA module loaded from {}", m.status.path);
    else if (m.status.state != cuda::ModuleStatus::State::not_built)
      log().info("CUDA module not loaded ({}): {}", cuda::to_string(m.status.state), m.status.detail);
    return m;
  }();
  return loaded;
}

}  // namespace

namespace detail {

const CudaDriver* cuda_driver() { return module().driver; }

void* cuda_module_symbol(const char* name) {
  const Module& m = module();
  return m.handle != nullptr ? dlsym(m.handle, name) : nullptr;
}

}  // namespace detail

namespace cuda {

namespace {

struct Probe {
  int devices = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    if (const detail::CudaDriver* driver = detail::cuda_driver()) {
      std::string why;
      p.devices = driver->device_count(why);
      if (p.devices == 0) p.reason = fmt::format("no CUDA device: {}", why);
    } else if (module_status().state == ModuleStatus::State::not_built) {
      p.reason = "no CUDA device: " + module_status().detail;
    } else {
      p.reason = fmt::format("no CUDA device: the CUDA module is not loaded ({}: {})",
                             to_string(module_status().state), module_status().detail);
    }
    if (p.devices == 0) log().info("{}; using host memory and CPU execution", p.reason);
    return p;
  }();
  return result;
}

}  // namespace

const ModuleStatus& module_status() { return module().status; }

const char* to_string(ModuleStatus::State state) noexcept {
  switch (state) {
    case ModuleStatus::State::loaded: return "loaded";
    case ModuleStatus::State::not_built: return "not built";
    case ModuleStatus::State::not_found: return "not found";
    case ModuleStatus::State::load_error: return "load error";
  }
  return "?";
}

int device_count() { return probe().devices; }

const std::string& unavailable_reason() { return probe().reason; }

DeviceInfo device_info(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count())
    throw UsageError(fmt::format("CUDA device {} does not exist ({} device(s){}{})", ordinal, device_count(),
                                 unavailable_reason().empty() ? "" : ": ", unavailable_reason()));
  return detail::cuda_driver()->device_info(ordinal);
}

}  // namespace cuda
}  // namespace ferry
