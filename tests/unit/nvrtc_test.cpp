// NVRTC compiling CUDA source kernels and the caches in front of it. NVRTC
// is a compiler library: all of this runs without a GPU or a driver.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "cuda_source/nvrtc_compiler.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

namespace fs = std::filesystem;

const char* const saxpy = R"(
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

class Nvrtc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device random;
    dir_ = fs::temp_directory_path() / ("ferry-nvrtc-test-" + std::to_string(random()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  NvrtcCompiler::Options options() const { return {dir_, true}; }
  std::size_t files() const {
    if (!fs::exists(dir_)) return 0;
    std::size_t n = 0;
    for (const auto& entry : fs::directory_iterator(dir_)) n += entry.path().extension() == ".bin" ? 1 : 0;
    return n;
  }
  fs::path dir_;
};

bool is_elf(const std::string& image) { return image.size() > 4 && image.compare(0, 4, "\x7f" "ELF") == 0; }

TEST_F(Nvrtc, CompilesSaxpyForHopperAndAmpere) {
  NvrtcCompiler compiler(options());
  const auto hopper = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  ASSERT_TRUE(hopper);
  EXPECT_FALSE(hopper->ptx);
  EXPECT_TRUE(is_elf(hopper->image)) << "a cubin is an ELF image";
  EXPECT_EQ(hopper->symbol, "saxpy");  // extern "C": not mangled
  EXPECT_EQ(hopper->key.size(), 64u);  // hex SHA-256
  const auto ampere = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 8, 0);
  EXPECT_TRUE(is_elf(ampere->image));
  EXPECT_NE(ampere->key, hopper->key);
  EXPECT_NE(ampere->image, hopper->image);
  EXPECT_EQ(compiler.stats().compiles, 2u);
  EXPECT_EQ(files(), 2u);
}

TEST_F(Nvrtc, EntryWithCppLinkageIsFoundByItsMangledName) {
  NvrtcCompiler compiler(options());
  const auto compiled = compiler.compile(
      CudaSource{"__global__ void twice(float* v, int n) { if (threadIdx.x < n) v[threadIdx.x] *= 2; }", "twice", {}}, 9, 0);
  EXPECT_TRUE(compiled->symbol.starts_with("_Z")) << compiled->symbol;
  EXPECT_NE(compiled->symbol.find("twice"), std::string::npos) << compiled->symbol;
}

TEST_F(Nvrtc, SyntaxErrorThrowsCompileErrorWithTheLog) {
  NvrtcCompiler compiler(options());
  const std::string broken = R"(
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + undefined_offset;
}
)";
  try {
    compiler.compile(CudaSource{broken, "saxpy", {}}, 9, 0);
    ADD_FAILURE() << "compiled broken source";
  } catch (const CompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(e.log().find("undefined_offset"), std::string::npos) << e.log();
    EXPECT_NE(e.log().find("saxpy.cu(4)"), std::string::npos) << "the log names the line: " << e.log();
    EXPECT_NE(what.find("cuda_kernel 'saxpy'"), std::string::npos) << what;
    EXPECT_NE(what.find(e.log()), std::string::npos) << "what() holds the whole log: " << what;
  }
  EXPECT_EQ(compiler.stats().compiles, 0u);
  EXPECT_EQ(files(), 0u);  // failures are not cached
  // A CompileError is a UsageError: the user's source is at fault.
  EXPECT_THROW(compiler.compile(CudaSource{broken, "saxpy", {}}, 9, 0), UsageError);
}

TEST_F(Nvrtc, BadOptionIsACompileError) {
  NvrtcCompiler compiler(options());
  EXPECT_THROW(compiler.compile(CudaSource{saxpy, "saxpy", {"--no-such-option"}}, 9, 0), CompileError);
}

TEST_F(Nvrtc, SecondCompileIsAMemoryHit) {
  NvrtcCompiler compiler(options());
  const auto first = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  const auto second = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  EXPECT_EQ(first, second);
  const auto stats = compiler.stats();
  EXPECT_EQ(stats.compiles, 1u);
  EXPECT_EQ(stats.memory_hits, 1u);
  EXPECT_EQ(stats.disk_hits, 0u);
}

TEST_F(Nvrtc, FreshCompilerHitsTheDiskCache) {
  std::shared_ptr<const CompiledKernel> first;
  {
    NvrtcCompiler compiler(options());
    first = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  }
  NvrtcCompiler fresh(options());
  const auto again = fresh.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  const auto stats = fresh.stats();
  EXPECT_EQ(stats.compiles, 0u);
  EXPECT_EQ(stats.disk_hits, 1u);
  EXPECT_EQ(again->image, first->image);
  EXPECT_EQ(again->symbol, first->symbol);
  EXPECT_EQ(again->key, first->key);
  // No temporary files are left behind.
  std::size_t others = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) others += entry.path().extension() == ".bin" ? 0 : 1;
  EXPECT_EQ(others, 0u);
}

TEST_F(Nvrtc, DifferentOptionsSourceOrArchitectureMiss) {
  NvrtcCompiler compiler(options());
  compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  compiler.compile(CudaSource{saxpy, "saxpy", {"-use_fast_math"}}, 9, 0);
  compiler.compile(CudaSource{saxpy, "saxpy", {}}, 8, 0);
  compiler.compile(CudaSource{std::string(saxpy) + "\n// changed\n", "saxpy", {}}, 9, 0);
  const auto stats = compiler.stats();
  EXPECT_EQ(stats.compiles, 4u);
  EXPECT_EQ(stats.memory_hits, 0u);
  EXPECT_EQ(files(), 4u);
}

TEST_F(Nvrtc, CorruptCacheFileIsCompiledAgain) {
  std::string key;
  {
    NvrtcCompiler compiler(options());
    key = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0)->key;
  }
  std::ofstream(dir_ / (key + ".bin"), std::ios::trunc) << "not a cache file";
  NvrtcCompiler fresh(options());
  const auto compiled = fresh.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  EXPECT_TRUE(is_elf(compiled->image));
  EXPECT_EQ(fresh.stats().compiles, 1u);
  EXPECT_EQ(fresh.stats().disk_hits, 0u);
}

TEST_F(Nvrtc, DiskCacheCanBeOff) {
  NvrtcCompiler compiler({dir_, false});
  compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  EXPECT_EQ(files(), 0u);
}

TEST_F(Nvrtc, GpuNewerThanNvrtcGetsPtx) {
  NvrtcCompiler compiler(options());
  const auto compiled = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 99, 0);
  EXPECT_TRUE(compiled->ptx);
  ASSERT_FALSE(compiled->image.empty());
  EXPECT_EQ(compiled->image.back(), '\0');  // loading PTX needs the terminator
  EXPECT_NE(compiled->image.find(".entry saxpy"), std::string::npos);
  NvrtcCompiler fresh(options());
  EXPECT_TRUE(fresh.compile(CudaSource{saxpy, "saxpy", {}}, 99, 0)->ptx);  // and so from the disk cache
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
}

TEST_F(Nvrtc, ArchitectureTooOldIsRefused) {
  NvrtcCompiler compiler(options());
  try {
    compiler.compile(CudaSource{saxpy, "saxpy", {}}, 2, 0);
    ADD_FAILURE() << "compiled for sm_20";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_20"), std::string::npos) << e.what();
  }
}

TEST(NvrtcCacheDir, FollowsTheEnvironment) {
  const char* saved = std::getenv("FERRY_CACHE_DIR");
  const std::string restore = saved ? saved : "";
  setenv("FERRY_CACHE_DIR", "/tmp/ferry-cache-here", 1);
  EXPECT_EQ(NvrtcCompiler::default_cache_dir(), fs::path("/tmp/ferry-cache-here/nvrtc"));
  unsetenv("FERRY_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string restore_xdg = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(NvrtcCompiler::default_cache_dir(), fs::path("/tmp/xdg/ferry/nvrtc"));
  unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(NvrtcCompiler::default_cache_dir(), fs::path(home) / ".cache/ferry/nvrtc");
  }
  if (!restore.empty()) setenv("FERRY_CACHE_DIR", restore.c_str(), 1);
  if (!restore_xdg.empty()) setenv("XDG_CACHE_HOME", restore_xdg.c_str(), 1);
}

}  // namespace
}  // namespace ferry::detail
