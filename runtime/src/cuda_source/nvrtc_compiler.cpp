#include "cuda_source/nvrtc_compiler.hpp"

#include <fcntl.h>
#include <nvrtc.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {
namespace {

// Like check_cuda, for NVRTC's own status codes.
void check_nvrtc(nvrtcResult status, const char* call) {
  if (status != NVRTC_SUCCESS) throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(status)));
}

struct Nvrtc {
  int major = 0, minor = 0;
  std::vector<int> archs;  // sm numbers it can emit a cubin for, ascending
};

const Nvrtc& nvrtc() {
  static const Nvrtc info = [] {
    Nvrtc n;
    check_nvrtc(nvrtcVersion(&n.major, &n.minor), "nvrtcVersion");
    int count = 0;
    check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
    n.archs.resize(static_cast<std::size_t>(count));
    if (count > 0) check_nvrtc(nvrtcGetSupportedArchs(n.archs.data()), "nvrtcGetSupportedArchs");
    std::sort(n.archs.begin(), n.archs.end());
    return n;
  }();
  return info;
}

// What to ask NVRTC for: the GPU's own cubin, or PTX for the newest
// architecture NVRTC knows when the GPU is newer still.
struct Target {
  int sm = 0;
  bool ptx = false;
  std::string option() const { return fmt::format("--gpu-architecture={}_{}", ptx ? "compute" : "sm", sm); }
};

Target target_for(const CudaSource& source, int major, int minor) {
  const int sm = major * 10 + minor;
  const Nvrtc& n = nvrtc();
  if (std::find(n.archs.begin(), n.archs.end(), sm) != n.archs.end()) return {sm, false};
  if (!n.archs.empty() && sm > n.archs.back()) return {n.archs.back(), true};
  std::string known;
  for (int a : n.archs) known += fmt::format("{}sm_{}", known.empty() ? "" : ", ", a);
  throw UsageError(fmt::format("cuda_kernel '{}': NVRTC {}.{} cannot compile for sm_{} (it targets {})", source.entry,
                               n.major, n.minor, sm, known));
}

// Length-prefixed fields, so no two different inputs hash the same bytes.
std::string cache_key(const CudaSource& source, const Target& target) {
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  const auto field = [&](std::string_view bytes) {
    const std::uint64_t size = bytes.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(size >> (8 * i));
    crypto_hash_sha256_update(&state, le, sizeof le);
    crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  };
  field("ferry-nvrtc-1");
  field(fmt::format("nvrtc {}.{}", nvrtc().major, nvrtc().minor));
  field(target.option());
  field(source.entry);
  field(source.source);
  field(std::to_string(source.options.size()));
  for (const auto& option : source.options) field(option);
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  std::string hex(2 * sizeof digest + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest, sizeof digest);
  hex.pop_back();
  return hex;
}

std::shared_ptr<const CompiledKernel> run_nvrtc(const CudaSource& source, const Target& target, std::string key) {
  nvrtcProgram program = nullptr;
  const std::string name = source.entry + ".cu";
  check_nvrtc(nvrtcCreateProgram(&program, source.source.c_str(), name.c_str(), 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  struct Destroy {
    nvrtcProgram& p;
    ~Destroy() { nvrtcDestroyProgram(&p); }
  } destroy{program};

  std::vector<std::string> options{target.option()};
  const bool has_std = std::any_of(source.options.begin(), source.options.end(), [](const std::string& o) {
    return o.starts_with("-std") || o.starts_with("--std");
  });
  if (!has_std) options.emplace_back("-std=c++17");
  options.insert(options.end(), source.options.begin(), source.options.end());
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());

  // The lowered name finds the entry whether or not it is extern "C".
  check_nvrtc(nvrtcAddNameExpression(program, source.entry.c_str()), "nvrtcAddNameExpression");
  const nvrtcResult compiled = nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  std::string messages;  // NVRTC's log
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    messages.resize(log_size);
    if (nvrtcGetProgramLog(program, messages.data()) != NVRTC_SUCCESS) messages.clear();
    while (!messages.empty() && (messages.back() == '\0' || messages.back() == '\n')) messages.pop_back();
  }
  if (compiled == NVRTC_ERROR_COMPILATION || compiled == NVRTC_ERROR_INVALID_OPTION) {
    throw CompileError(fmt::format("cuda_kernel '{}': NVRTC {}.{} could not compile it ({}, options: {}):\n{}",
                                   source.entry, nvrtc().major, nvrtc().minor, target.option(),
                                   fmt::join(options, " "), messages.empty() ? nvrtcGetErrorString(compiled) : messages),
                       messages);
  }
  check_nvrtc(compiled, "nvrtcCompileProgram");
  if (!messages.empty()) log().debug("NVRTC compiled kernel {} with warnings:\n{}", source.entry, messages);

  auto out = std::make_shared<CompiledKernel>();
  out->ptx = target.ptx;
  out->key = std::move(key);
  std::size_t size = 0;
  if (target.ptx) {
    check_nvrtc(nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
    out->image.resize(size);  // includes the terminating NUL that loading PTX needs
    check_nvrtc(nvrtcGetPTX(program, out->image.data()), "nvrtcGetPTX");
  } else {
    check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
    out->image.resize(size);
    check_nvrtc(nvrtcGetCUBIN(program, out->image.data()), "nvrtcGetCUBIN");
  }
  const char* lowered = nullptr;
  check_nvrtc(nvrtcGetLoweredName(program, source.entry.c_str(), &lowered), "nvrtcGetLoweredName");
  out->symbol = lowered;
  return out;
}

// Cache files: a header line, the symbol on a line, then the image.
constexpr std::string_view file_magic = "ferry-nvrtc-1";

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// Makes `dir` (0700) when it is missing and opens it into `fd`; returns why
// it may not hold the cache, or nothing. A cubin from the cache runs on the
// GPU with this process's rights, so the folder must be one nobody else
// can write into: not a symlink (lstat: it could lead anywhere), this
// user's, and not group- or world-writable. The folder is opened with
// O_NOFOLLOW and compared with what lstat saw, and files are opened
// relative to that descriptor, so swapping the path afterwards changes nothing.
std::optional<std::string> open_cache_folder(const std::filesystem::path& dir, int& fd) {
  struct stat seen {};
  if (::lstat(dir.c_str(), &seen) != 0) {
    if (errno != ENOENT) return fmt::format("cannot be examined ({})", errno_text(errno));
    std::error_code error;
    if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), error);
    if (error) return fmt::format("cannot be made: its parent cannot ({})", error.message());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fmt::format("cannot be made ({})", errno_text(errno));
    if (::lstat(dir.c_str(), &seen) != 0) return fmt::format("cannot be examined ({})", errno_text(errno));
  }
  if (S_ISLNK(seen.st_mode)) return std::string("is a symbolic link");
  if (!S_ISDIR(seen.st_mode)) return std::string("is not a folder");
  if (seen.st_uid != ::geteuid())
    return fmt::format("belongs to user id {}, not to this process's user id {}", seen.st_uid, ::geteuid());
  if ((seen.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("is writable by {} (mode {:04o})", (seen.st_mode & S_IWOTH) != 0 ? "every user" : "its group",
                       seen.st_mode & 07777);
  fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot be opened ({})", errno_text(errno));
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != seen.st_dev || opened.st_ino != seen.st_ino) {
    ::close(fd);
    fd = -1;
    return std::string("was replaced while it was checked");
  }
  // Ours and safe: others need not read it either (a folder an older Ferry made 0755).
  if ((opened.st_mode & 077) != 0) ::fchmod(fd, 0700);
  return std::nullopt;
}

// The whole of an open file, or nothing when reading fails.
std::optional<std::string> read_all(int fd) {
  std::string bytes;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n == 0) return bytes;
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    bytes.append(chunk, static_cast<std::size_t>(n));
  }
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

NvrtcCompiler::NvrtcCompiler() : NvrtcCompiler(Options{}) {}

NvrtcCompiler::NvrtcCompiler(Options options) : options_(std::move(options)) {
  if (options_.cache_dir.empty()) options_.cache_dir = default_cache_dir();
  if (sodium_init() < 0) throw Error("sodium_init failed: libsodium cannot hash the NVRTC cache keys");
}

NvrtcCompiler::~NvrtcCompiler() {
  if (cache_fd_ >= 0) ::close(cache_fd_);
}

int NvrtcCompiler::cache_folder() const {
  std::call_once(cache_checked_, [this] {
    if (!options_.disk_cache) return;
    if (auto wrong = open_cache_folder(options_.cache_dir, cache_fd_))
      log().warn("NVRTC cache: not using {}: it {}; compiled kernels are kept in memory only (set FERRY_CACHE_DIR "
                 "to a folder of your own)",
                 options_.cache_dir.string(), *wrong);
  });
  return cache_fd_;
}

bool NvrtcCompiler::disk_cache() const { return cache_folder() >= 0; }

NvrtcCompiler& NvrtcCompiler::shared() {
  // Never destroyed: a kernel may still compile while the process exits.
  static NvrtcCompiler* const instance = new NvrtcCompiler();
  return *instance;
}

std::filesystem::path NvrtcCompiler::default_cache_dir() {
  if (const char* dir = env("FERRY_CACHE_DIR")) return std::filesystem::path(dir) / "nvrtc";
  if (const char* dir = env("XDG_CACHE_HOME")) return std::filesystem::path(dir) / "ferry" / "nvrtc";
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "ferry" / "nvrtc";
  // One per user: a shared name in /tmp would be another user's to create first.
  return std::filesystem::temp_directory_path() / fmt::format("ferry-nvrtc-{}", ::geteuid());
}

NvrtcCompiler::Stats NvrtcCompiler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::shared_ptr<const CompiledKernel> NvrtcCompiler::compile(const CudaSource& source, int arch_major, int arch_minor) {
  const Target target = target_for(source, arch_major, arch_minor);
  const std::string key = cache_key(source, target);
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  {
    std::unique_lock lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      ++stats_.memory_hits;
      auto future = it->second;
      lock.unlock();
      return future.get();  // rethrows when the compile it waited for failed
    }
    entries_.emplace(key, promise.get_future().share());
  }
  try {
    std::shared_ptr<const CompiledKernel> compiled = load(key);
    if (compiled) {
      std::lock_guard lock(mutex_);
      ++stats_.disk_hits;
    } else {
      compiled = run_nvrtc(source, target, key);
      {
        std::lock_guard lock(mutex_);
        ++stats_.compiles;
      }
      store(*compiled);
    }
    promise.set_value(compiled);
    return compiled;
  } catch (...) {
    // Not kept: a later call tries again (the failure may have been NVRTC running out of memory).
    {
      std::lock_guard lock(mutex_);
      entries_.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

std::shared_ptr<const CompiledKernel> NvrtcCompiler::load(const std::string& key) const {
  const int dir = cache_folder();
  if (dir < 0) return nullptr;
  const std::string name = key + ".bin";
  const auto path = options_.cache_dir / name;
  // O_NOFOLLOW: a symlink planted in the folder is refused, not followed.
  const int fd = ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      log().warn("NVRTC cache file {} cannot be opened ({}); compiling again", path.string(), errno_text(errno));
    return nullptr;
  }
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const std::optional<std::string> bytes = regular ? read_all(fd) : std::nullopt;
  ::close(fd);
  if (!bytes) {
    log().warn("NVRTC cache file {} is not a readable file; compiling again", path.string());
    return nullptr;
  }
  // magic, kind and symbol lines, then the image
  std::string_view rest = *bytes;
  const auto line = [&rest]() -> std::optional<std::string_view> {
    const std::size_t end = rest.find('\n');
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view text = rest.substr(0, end);
    rest.remove_prefix(end + 1);
    return text;
  };
  const auto magic = line();
  const auto kind = line();
  const auto symbol = line();
  if (!magic || *magic != file_magic || !kind || (*kind != "cubin" && *kind != "ptx") || !symbol || symbol->empty()) {
    log().warn("NVRTC cache file {} is not one of Ferry's; compiling again", path.string());
    return nullptr;
  }
  auto out = std::make_shared<CompiledKernel>();
  out->ptx = *kind == "ptx";
  out->symbol = std::string(*symbol);
  out->key = key;
  out->image.assign(rest);
  if (out->image.empty() || (out->ptx && out->image.back() != '\0')) {
    log().warn("NVRTC cache file {} is truncated; compiling again", path.string());
    return nullptr;
  }
  return out;
}

void NvrtcCompiler::store(const CompiledKernel& compiled) const {
  const int dir = cache_folder();
  if (dir < 0) return;
  // Written under a unique name and renamed into place: another process
  // reading the cache sees the whole file or none.
  static std::atomic<unsigned> counter{0};
  const std::string name = compiled.key + ".bin";
  const std::string temp = fmt::format(".{}.{}.{}.tmp", compiled.key, ::getpid(), counter.fetch_add(1));
  const int fd = ::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    log().debug("NVRTC cache: could not store {} in {}: {}", compiled.key, options_.cache_dir.string(),
                errno_text(errno));
    return;
  }
  const std::string header = fmt::format("{}\n{}\n{}\n", file_magic, compiled.ptx ? "ptx" : "cubin", compiled.symbol);
  bool ok = write_all(fd, header) && write_all(fd, compiled.image);
  const int error = ok ? 0 : errno;
  ok = ::close(fd) == 0 && ok;
  if (ok && ::renameat(dir, temp.c_str(), dir, name.c_str()) == 0) return;
  log().debug("NVRTC cache: could not store {} in {}: {}", compiled.key, options_.cache_dir.string(),
              errno_text(error != 0 ? error : errno));
  ::unlinkat(dir, temp.c_str(), 0);
}

}  // namespace ferry::detail
