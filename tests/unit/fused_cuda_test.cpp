// The fused kernel's CUDA source compiles with NVRTC (a compiler library:
// no GPU needed), for programs using every instruction and element type.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "cuda_source/nvrtc_compiler.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "fused_cuda.hpp"

namespace ferry::detail {
namespace {

namespace fs = std::filesystem;

TEST(FusedCuda, GeneratedSourceCompilesWithNvrtc) {
  std::random_device random;
  const fs::path dir = fs::temp_directory_path() / ("ferry-fused-cuda-test-" + std::to_string(random()));
  NvrtcCompiler compiler({dir, true});
  const std::vector<std::pair<std::string, std::vector<DType>>> programs{
      {"d=3,1500 s1=0,1 x0 x1 mul f32:0.5 maximum sigmoid x0 tanh add x1 exp sub", {DType::f32, DType::f32}},
      {"d=7 x0 x0 floordiv x0 i64:-1 mod add x0 i64:2 pow x0 abs x0 sign sub sub x0 i64:3 xor add add neg",
       {DType::i64}},
      {"d=2,3 x0 f64:1 lt x0 isnan or x0 f64:-1 f64:1 clip f64:nan where x0 sqrt log1p add", {DType::f64}},
      {"d=5 o=10 i0 uniform:7 i0 normal:8 add as:i32 x0 as:i32 add as:u8 not x0 i32:0 ne and", {DType::i32}},
      {"d=4 x0 as:f64 f64:inf minimum as:i64 f32:1e-05 as:i64 ge", {DType::f32}},
  };
  int i = 0;
  for (const auto& [program, inputs] : programs) {
    const std::string entry = "fused_" + std::to_string(i++);
    const std::string source = kernels::fused_cuda_source(program, inputs, DType::f64, entry);
    const auto compiled = compiler.compile(CudaSource{source, entry, {}}, 9, 0);
    ASSERT_TRUE(compiled) << source;
    EXPECT_EQ(compiled->symbol, entry);
    EXPECT_GT(compiled->image.size(), 100u);
  }
  fs::remove_all(dir);
}

// Reductions: every fold and accumulator type, into one y element (thread
// folds, one atomic each) and into many (one atomic per element); both
// entries, the fold and the identity fill, compile.
TEST(FusedCuda, FoldingProgramsCompileWithBothEntries) {
  std::random_device random;
  const fs::path dir = fs::temp_directory_path() / ("ferry-fused-cuda-fold-test-" + std::to_string(random()));
  NvrtcCompiler compiler({dir, true});
  struct Case {
    std::string program;
    std::vector<DType> inputs;
    DType y;
  };
  const std::vector<Case> cases{
      {"d=40,6 y=0,0 f=add x0 as:f64", {DType::f32}, DType::f64},
      {"d=40,6 y=0,1 f=add x0 x0 mul as:f64", {DType::f32}, DType::f64},
      {"d=40,6 y=0,1 f=max x0", {DType::f32}, DType::f32},
      {"d=40,6 y=0,0 f=min x0", {DType::f64}, DType::f64},
      {"d=7,3 y=1,0 f=mul x0", {DType::f64}, DType::f64},
      {"d=9 y=0 f=add x0 as:i64", {DType::i32}, DType::i64},
      {"d=9,2 y=0,1 f=max x0", {DType::i32}, DType::i32},
      {"d=9,2 y=0,1 f=min x0", {DType::i64}, DType::i64},
      {"d=9,2 y=0,1 f=mul x0", {DType::i64}, DType::i64},
      {"d=9,2 y=0,1 f=min x0 f32:0 ne", {DType::f32}, DType::u8},  // all
      {"d=9 y=0 f=max x0 f32:0 ne", {DType::f32}, DType::u8},      // any
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.program);
    const std::string entry = "fold_" + std::to_string(i++);
    const std::string source = kernels::fused_cuda_source(c.program, c.inputs, c.y, entry);
    for (const std::string& name : {entry, entry + "_identity"}) {
      const auto compiled = compiler.compile(CudaSource{source, name, {}}, 9, 0);
      ASSERT_TRUE(compiled) << source;
      EXPECT_EQ(compiled->symbol, name);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry::detail
