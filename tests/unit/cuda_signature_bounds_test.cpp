// Reading a signature from hostile source: a client sends ferryd its CUDA
// source, so every shape of input must be read in time linear in its size,
// and nothing in it may reach the server's files (confine_cuda_source).
// Each case is 1 MiB of what once made the parser quadratic; ctest's TIMEOUT
// on this executable is what fails a regression (no timing is asserted
// here), and the time each case took is printed for the record.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_source/cuda_signature.hpp"
#include "ferry/error.hpp"
#include "ferry/printable.hpp"
#include "ferry/runtime/cuda_source.hpp"

namespace ferry {
namespace {

constexpr std::size_t mebibyte = 1 << 20;

std::string repeat(const std::string& head, const std::string& unit, const std::string& tail) {
  std::string s = head;
  while (s.size() + unit.size() + tail.size() <= mebibyte) s += unit;
  return s + tail;
}

// Parses; a refusal is a fine answer too, as long as it comes.
bool parses(const std::string& source, const char* entry, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  bool ok = true;
  try {
    detail::parse_cuda_signature(source, entry);
  } catch (const UsageError&) {
    ok = false;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-44s %7zu bytes: %8.1f ms (%s)\n", what, source.size(), ms, ok ? "parsed" : "refused");
  return ok;
}

TEST(CudaSignatureBounds, NestedCallsOfOneName) {
  EXPECT_FALSE(parses(repeat("", "f(", ""), "f", "f(f(f(..."));
  EXPECT_FALSE(parses(repeat("", "f(", "") + std::string(mebibyte / 2, ')'), "f", "f(f(f(...)))"));
}

TEST(CudaSignatureBounds, NestedCallsAfterGlobal) {
  // Every 'f' has __global__ in its declaration's prefix: all are candidates.
  EXPECT_FALSE(parses(repeat("__global__ void ", "f(", ""), "f", "__global__ void f(f(f(..."));
  EXPECT_FALSE(parses(repeat("__global__ void ", "g(", ""), "f", "__global__ void g(g(g(... (other entry)"));
  EXPECT_FALSE(parses(repeat("__global__ void ", "f(x) ", ";"), "f", "__global__ void f(x) f(x) ... ;"));
}

TEST(CudaSignatureBounds, ManyKernelNames) {
  std::string s;
  for (std::size_t i = 0; s.size() < mebibyte; ++i) s += "__global__ void k" + std::to_string(i) + "();";
  EXPECT_FALSE(parses(s, "missing", "100k distinct kernels, entry missing"));
}

TEST(CudaSignatureBounds, ManyParameters) {
  std::string s = "__global__ void k(";
  for (std::size_t i = 0; s.size() < mebibyte; ++i) s += "int a" + std::to_string(i) + ", ";
  s += "int last) {}";
  EXPECT_TRUE(parses(s, "k", "one kernel, 100k parameters"));
  EXPECT_EQ(detail::parse_cuda_signature(s, "k").params.back().name, "last");
}

TEST(CudaSignatureBounds, AngleBracketsAndBoundaries) {
  EXPECT_FALSE(parses(repeat("", "a<b;{f(", ""), "f", "a<b;{f(a<b;{f(..."));
  EXPECT_FALSE(parses(repeat("", "> ; f(", ""), "f", "> ; f(> ; f(..."));
  EXPECT_TRUE(parses(repeat("", "x<y>z; ", "__global__ void f(int n) {}"), "f", "x<y>z; ... then the kernel"));
}

TEST(CudaSignatureBounds, RawStringsAndComments) {
  EXPECT_FALSE(parses(repeat("", "R\"", ""), "f", "R\"R\"R\"..."));
  EXPECT_FALSE(parses(repeat("R\"", "d", "("), "f", "raw string with a 1 MiB delimiter"));
  EXPECT_FALSE(parses(repeat("", "/*", ""), "f", "/*/*/*..."));
  EXPECT_FALSE(parses(repeat("", "#\\\n", ""), "f", "continued directive lines"));
}

// What ferryd checks before the parser: the includes and options.
bool confined(std::string source, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  CudaSource cuda{std::move(source), "f", {}};
  bool ok = true;
  try {
    confine_cuda_source(cuda);
  } catch (const UsageError&) {
    ok = false;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-44s %7zu bytes: %8.1f ms (%s)\n", what, cuda.source.size(), ms, ok ? "taken" : "refused");
  return ok;
}

TEST(CudaConfinementBounds, HostileSourceIsScannedInLinearTime) {
  EXPECT_TRUE(confined(repeat("", "#/*", ""), "#/*#/*#/*..."));
  EXPECT_TRUE(confined(repeat("", "#//", "\n"), "#//#//#//... on one line"));
  EXPECT_FALSE(confined(repeat("", "#include <", ">"), "#include <#include <... >"));
  EXPECT_TRUE(confined(repeat("", "#include <a.h>\n", ""), "#include <a.h> 70k times"));
  EXPECT_FALSE(confined(repeat("", "__has_include(", ""), "__has_include(__has_include(..."));
}

TEST(CudaConfinement, IncludesAndOptions) {
  auto refused = [](std::string source, std::vector<std::string> options = {}) {
    CudaSource cuda{std::move(source), "k", std::move(options)};
    try {
      confine_cuda_source(cuda);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused("#include \"/etc/passwd\"").find("#include \"/etc/passwd\" is refused"), std::string::npos);
  EXPECT_NE(refused("#include <x/../../y>").find("is refused"), std::string::npos);
  EXPECT_NE(refused("#include MACRO").find("a macro computes"), std::string::npos);
  // Raw strings, digit separators and line splices cannot hide one.
  EXPECT_NE(refused("int a = 1'0 + '/*';\n#include \"/etc/passwd\"\n// */").find("is refused"), std::string::npos);
  EXPECT_NE(refused("auto s = R\"x( )\\\nx\" /* )x\";\n#include \"/etc/passwd\"\n// */").find("is refused"),
            std::string::npos);
  EXPECT_NE(refused("#/*\n*/include \"/etc/passwd\"").find("is refused"), std::string::npos);
  EXPECT_NE(refused("", {"--pre-include=/etc/passwd"}).find("option '--pre-include=/etc/passwd' is refused"),
            std::string::npos);
  EXPECT_EQ(refused("#include <cuda_fp16.h>\n#include \"local/header.h\"", {"-DX=/etc", "-use_fast_math"}), "");
  CudaSource cuda{"", "k", {}};
  confine_cuda_source(cuda);
  EXPECT_EQ(cuda.options, std::vector<std::string>{"--no-source-include"});
}

TEST(WithoutPaths, ServerPathsLeaveCompileLogs) {
  EXPECT_EQ(without_paths("/usr/local/cuda/include/cuda_fp16.hpp(12): error: x"), "<path>(12): error: x");
  EXPECT_EQ(without_paths("cannot open source file \"/etc/passwd\""), "cannot open source file \"<path>\"");
  EXPECT_EQ(without_paths("k.cu(3): error: a/b and 1/2 stay"), "k.cu(3): error: a/b and 1/2 stay");
}

// The tables behind the linear parser answer as the walk-back did.
TEST(CudaSignatureBounds, SameAnswersAsBefore) {
  const auto sig = detail::parse_cuda_signature(
      "template <typename T> __device__ T twice(T x) { return x + x; }\n"
      "struct S { int a; };\n"
      "extern \"C\" __global__ void __launch_bounds__(256) k(float* y, const float* x, int n) { y[0] = twice(x[0]); }",
      "k");
  ASSERT_EQ(sig.params.size(), 3u);
  EXPECT_TRUE(sig.params[1].const_pointee);
  EXPECT_THROW(detail::parse_cuda_signature("template <typename T> __global__ void k(T* y) {}", "k"), UsageError);
  // A prototype then the definition: one kernel, not an overload.
  EXPECT_EQ(detail::parse_cuda_signature("__global__ void k(int n); __global__ void k(int n) {}", "k").params.size(), 1u);
  EXPECT_THROW(detail::parse_cuda_signature("__global__ void k(int n) {} __global__ void k(float x) {}", "k"),
               UsageError);
  // __global__ before the last boundary is another declaration's.
  EXPECT_THROW(detail::parse_cuda_signature("__global__ void a(); void k(int n) {}", "k"), UsageError);
}

}  // namespace
}  // namespace ferry
