// Compiles CUDA source with NVRTC for one GPU architecture, caching the
// result in memory and on disk under a SHA-256 of everything that shapes it
// (source, entry, options, architecture, NVRTC's version). Only in builds
// with FERRY_WITH_CUDA; needs NVRTC, not a GPU or a driver.
#pragma once

#include <cstddef>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ferry/runtime/cuda_source.hpp"

namespace ferry::detail {

struct CompiledKernel {
  // A cubin, or NUL-terminated PTX when the GPU is newer than this NVRTC
  // knows (the driver then compiles the PTX for it).
  std::string image;
  bool ptx = false;
  std::string symbol;  // the entry's name in the image (mangled unless extern "C")
  std::string key;     // hex SHA-256: the cache file's name, and which library a device loaded
};

class NvrtcCompiler {
 public:
  struct Options {
    // Empty: default_cache_dir(). Made 0700 when missing. Used only when it
    // is a real folder (not a symlink) of this user's that no group or other
    // user may write: anyone who can write there could hand this process a
    // cubin to run. Otherwise the disk cache is off, with one warning naming
    // the folder and what is wrong with it.
    std::filesystem::path cache_dir;
    bool disk_cache = true;
  };
  struct Stats {
    std::size_t compiles = 0;     // NVRTC ran
    std::size_t memory_hits = 0;  // found in this compiler's memory
    std::size_t disk_hits = 0;    // read from the cache folder
  };

  NvrtcCompiler();
  explicit NvrtcCompiler(Options options);
  ~NvrtcCompiler();
  NvrtcCompiler(const NvrtcCompiler&) = delete;
  NvrtcCompiler& operator=(const NvrtcCompiler&) = delete;
  // The compiler kernels launch through; its cache lives as long as the process.
  static NvrtcCompiler& shared();
  // $FERRY_CACHE_DIR/nvrtc, else $XDG_CACHE_HOME/ferry/nvrtc, else
  // ~/.cache/ferry/nvrtc, else $TMPDIR/ferry-nvrtc-<uid>.
  static std::filesystem::path default_cache_dir();
  // Whether the disk cache is in use: on, and its folder passed the checks
  // (made and checked at the first call).
  bool disk_cache() const;

  // Throws CompileError (what(): the entry and NVRTC's log) when the source
  // does not compile, UsageError for an architecture NVRTC cannot target,
  // Error when NVRTC itself fails. Thread-safe; concurrent calls for the
  // same key compile once.
  std::shared_ptr<const CompiledKernel> compile(const CudaSource& source, int arch_major, int arch_minor);

  Stats stats() const;
  const std::filesystem::path& cache_dir() const noexcept { return options_.cache_dir; }

 private:
  std::shared_ptr<const CompiledKernel> load(const std::string& key) const;
  void store(const CompiledKernel& compiled) const;
  // The cache folder, opened once, or -1 when there is none to use.
  int cache_folder() const;

  Options options_;
  mutable std::once_flag cache_checked_;
  mutable int cache_fd_ = -1;  // closed with the compiler; files are opened relative to it
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> entries_;
  Stats stats_;
};

}  // namespace ferry::detail
