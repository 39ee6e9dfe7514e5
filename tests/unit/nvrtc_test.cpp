// NVRTC compiling CUDA source kernels and the caches in front of it. NVRTC
// is a compiler library: all of this runs without a GPU or a driver.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "cuda_source/nvrtc_compiler.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "heavy_cuda_source.hpp"
#include "saxpy_cuda_source.hpp"

namespace ferry::detail {
namespace {

namespace fs = std::filesystem;

const char* const saxpy = testing::saxpy_cuda_source;

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

// ---- the time limit at definition (CompileBudget) ----

const std::string heavy = testing::heavy_cuda_source(18);

using namespace std::chrono_literals;

// A compile that overran still runs; the test waits for it, so no NVRTC
// thread outlives the test (nor the process's teardown).
void wait_until_idle(const CompileBudget& budget) {
  for (int i = 0; i < 12000 && budget.running() > 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(budget.running(), 0u) << "a compile still runs after two minutes";
}

TEST_F(Nvrtc, CompileOverItsLimitFailsNamingTheKernelAndTheLimit) {
  NvrtcCompiler compiler(options());
  CompileBudget budget(50ms, 2);
  try {
    budget.run("heavy", [&] { compiler.compile(CudaSource{heavy, "heavy", {}}, 9, 0); });
    ADD_FAILURE() << "the heavy source compiled within 50 ms";
  } catch (const CompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda_kernel 'heavy'"), std::string::npos) << what;
    EXPECT_NE(what.find("within the 0.05 s limit"), std::string::npos) << what;
  }
  // Still running: the caller was answered at the limit, not when NVRTC returned.
  EXPECT_EQ(budget.running(), 1u) << "the overrun compile counts until NVRTC returns";
  wait_until_idle(budget);
  // It finished on its own thread, into the cache: the next definition finds it.
  EXPECT_EQ(compiler.stats().compiles, 1u);
  budget.run("heavy", [&] { compiler.compile(CudaSource{heavy, "heavy", {}}, 9, 0); });
  EXPECT_EQ(compiler.stats().memory_hits, 1u);
}

TEST_F(Nvrtc, AnOverrunCompileDoesNotBlockAnother) {
  NvrtcCompiler compiler(options());
  CompileBudget slow(50ms, 2);
  EXPECT_THROW(slow.run("heavy", [&] { compiler.compile(CudaSource{heavy, "heavy", {}}, 9, 0); }), CompileError);
  // Another client's definitions (another budget) compile meanwhile, with the same compiler.
  CompileBudget other(60s, 2);
  other.run("saxpy", [&] { compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0); });
  other.run("saxpy", [&] { compiler.compile(CudaSource{saxpy, "saxpy", {"-use_fast_math"}}, 8, 0); });
  EXPECT_EQ(slow.running(), 1u) << "the heavy compile finished before the others: the test proves nothing";
  EXPECT_EQ(compiler.stats().compiles, 2u);  // the heavy one still runs
  wait_until_idle(slow);
}

TEST_F(Nvrtc, OverrunCompilesAreBoundedPerClient) {
  NvrtcCompiler compiler(options());
  CompileBudget budget(50ms, 1);
  EXPECT_THROW(budget.run("heavy", [&] { compiler.compile(CudaSource{heavy, "heavy", {}}, 9, 0); }), CompileError);
  bool ran = false;
  try {
    budget.run("saxpy", [&] { ran = true; });
    ADD_FAILURE() << "a second compile started while the first still runs";
  } catch (const CompileError&) {
    ADD_FAILURE() << "refused as a timeout, not as a full budget";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda_kernel 'saxpy'"), std::string::npos) << what;
    EXPECT_NE(what.find("still running"), std::string::npos) << what;
  }
  EXPECT_FALSE(ran) << "nothing starts when the budget is full";
  wait_until_idle(budget);
  // Free again. Not a real compile: under 50 ms only on an idle machine, and
  // one that overran would outlive `compiler`, which it uses.
  budget.run("saxpy", [&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST_F(Nvrtc, CompileErrorsComeThroughTheBudget) {
  NvrtcCompiler compiler(options());
  CompileBudget budget(60s, 2);
  try {
    budget.run("broken", [&] {
      compiler.compile(CudaSource{"extern \"C\" __global__ void broken(float* y) { y[0] = nowhere; }", "broken", {}}, 9,
                       0);
    });
    ADD_FAILURE() << "compiled broken source";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("nowhere"), std::string::npos) << e.log();
  }
  EXPECT_EQ(budget.running(), 0u);
}

TEST(CompileBudget, RefusesANonsenseLimit) {
  EXPECT_THROW(CompileBudget(0ms, 1), UsageError);
  EXPECT_THROW(CompileBudget(1s, 0), UsageError);
}

TEST(CompileBudget, WithoutGpusNothingCompiles) {
  CompileBudget budget(1ms, 1);
  // Even a source that would not compile: no GPU, nothing to compile for.
  EXPECT_NO_THROW(compile_cuda_source(CudaSource{"not CUDA at all", "x", {}}, {}, budget));
  EXPECT_EQ(budget.running(), 0u);
}

// ---- the cache folder's checks ----

class NvrtcCacheFolder : public Nvrtc {
 protected:
  // Compiles saxpy with a fresh compiler; true when it used the disk cache.
  bool cached() {
    NvrtcCompiler compiler(options());
    compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
    return compiler.disk_cache();
  }
  static mode_t mode(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
};

TEST_F(NvrtcCacheFolder, MadeOnlyForItsOwner) {
  EXPECT_TRUE(cached());
  EXPECT_EQ(mode(dir_), 0700u);
  EXPECT_EQ(files(), 1u);
}

TEST_F(NvrtcCacheFolder, ATooOpenFolderOfOursIsTightened) {
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0755);
  EXPECT_TRUE(cached());
  EXPECT_EQ(mode(dir_), 0700u);
}

TEST_F(NvrtcCacheFolder, ASymlinkIsRefused) {
  const fs::path real = dir_.string() + "-real";
  fs::create_directories(real);
  ::chmod(real.c_str(), 0700);
  fs::create_directory_symlink(real, dir_);
  EXPECT_FALSE(cached());
  EXPECT_TRUE(fs::is_empty(real)) << "nothing was written through the link";
  fs::remove(dir_);
  fs::remove_all(real);
}

TEST_F(NvrtcCacheFolder, AGroupOrWorldWritableFolderIsRefused) {
  fs::create_directories(dir_);
  for (mode_t m : {0770, 0707, 01777}) {
    ::chmod(dir_.c_str(), m);
    EXPECT_FALSE(cached()) << std::oct << m;
    EXPECT_EQ(files(), 0u);
    EXPECT_EQ(mode(dir_), m) << "a folder refused is left as it was";
  }
}

TEST_F(NvrtcCacheFolder, AFolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a folder another user's needs root";
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0700);
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);  // nobody
  EXPECT_FALSE(cached());
  EXPECT_EQ(files(), 0u);
}

TEST_F(NvrtcCacheFolder, ASymlinkedCacheFileIsNotFollowed) {
  std::string key;
  {
    NvrtcCompiler compiler(options());
    key = compiler.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0)->key;
  }
  // Planted in place of the entry, pointing at a file of the attacker's choosing.
  const fs::path entry = dir_ / (key + ".bin");
  const fs::path elsewhere = dir_.string() + "-elsewhere.bin";
  fs::copy_file(entry, elsewhere);
  fs::remove(entry);
  fs::create_symlink(elsewhere, entry);
  NvrtcCompiler fresh(options());
  fresh.compile(CudaSource{saxpy, "saxpy", {}}, 9, 0);
  EXPECT_EQ(fresh.stats().disk_hits, 0u) << "read through a symlink";
  EXPECT_EQ(fresh.stats().compiles, 1u);
  fs::remove(elsewhere);
}

TEST(NvrtcCacheDir, TheTemporaryFallbackIsPerUser) {
  const char* vars[] = {"FERRY_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::string saved[3];
  bool had[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = std::getenv(vars[i]);
    had[i] = v != nullptr;
    if (had[i]) saved[i] = v;
    unsetenv(vars[i]);
  }
  EXPECT_EQ(NvrtcCompiler::default_cache_dir(),
            fs::temp_directory_path() / ("ferry-nvrtc-" + std::to_string(::geteuid())));
  for (int i = 0; i < 3; ++i)
    if (had[i]) setenv(vars[i], saved[i].c_str(), 1);
}

}  // namespace
}  // namespace ferry::detail
