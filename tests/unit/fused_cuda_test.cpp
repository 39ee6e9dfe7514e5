// The fused kernel's CUDA source compiles with NVRTC (a compiler library:
// no GPU needed), for programs using every instruction and element type.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <tuple>

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
  std::vector<std::pair<std::string, std::vector<DType>>> programs{
      {"d=3,1500 s1=0,1 x0 x1 mul f32:0.5 maximum sigmoid x0 tanh add x1 exp sub", {DType::f32, DType::f32}},
      {"d=7 x0 x0 floordiv x0 i64:-1 mod add x0 i64:2 pow x0 abs x0 sign sub sub x0 i64:3 xor add add neg",
       {DType::i64}},
      {"d=2,3 x0 f64:1 lt x0 isnan or x0 f64:-1 f64:1 clip f64:nan where x0 sqrt log1p add", {DType::f64}},
      {"d=5 o=10 i0 uniform:7 i0 normal:8 add as:i32 x0 as:i32 add as:b8 not x0 i32:0 ne and", {DType::i32}},
      {"d=4 x0 as:f64 f64:inf minimum as:i64 f32:1e-05 as:i64 ge", {DType::f32}},
      {"d=2,3,3,2,2,2 s0=6,0,2,0,1,0 s1=0,4,0,2,0,1 x0 x1 add", {DType::f64, DType::f64}},
  };
  // The array API's other functions, on both float types.
  for (const auto& [code, type] : {std::tuple{"f32", DType::f32}, std::tuple{"f64", DType::f64}}) {
    programs.emplace_back(
        fmt::format("d=5 x0 signbit x0 tan x0 asin add x0 acos add x0 atan add x0 sinh add x0 cosh add x0 asinh add "
                    "x0 acosh add x0 atanh add x0 expm1 add x0 log2 add x0 log10 add x0 trunc add x0 round add "
                    "x0 x0 atan2 add x0 x0 copysign add x0 x0 hypot add x0 {0}:2 logaddexp add x0 where",
                    code),
        std::vector<DType>{type});
  }
  // Every integer type through every integer instruction, and casts among them, bool and floats.
  const std::string int_ops =
      "x0 x0 floordiv x0 {0}:3 mod add x0 {0}:2 pow x0 abs x0 sign sub sub x0 {0}:{1} xor add add neg "
      "x0 x0 maximum x0 minimum add x0 square add x0 {0}:1 lt x0 x0 square where add x0 x0 x0 clip and "
      "as:f32 as:{0} as:b8 as:{0} as:f64 as:{0} x0 {0}:0 ne x0 {0}:1 eq or x0 x0 neg where add "
      "as:i8 as:u16 as:u64 as:i16 as:u32 as:u8 as:i64 as:{0}";
  for (const auto& [code, type, ones] : {std::tuple{"i8", DType::i8, "-1"}, std::tuple{"i16", DType::i16, "-1"},
                                         std::tuple{"u8", DType::u8, "255"}, std::tuple{"u16", DType::u16, "65535"},
                                         std::tuple{"u32", DType::u32, "4294967295"},
                                         std::tuple{"u64", DType::u64, "18446744073709551615"}}) {
    programs.emplace_back("d=5 " + fmt::format(fmt::runtime(int_ops), code, ones), std::vector<DType>{type});
    programs.emplace_back(
        fmt::format("d=5 x0 signbit x0 x0 shl x0 {0}:1 shr add x0 trunc x0 round add add x0 where", code),
        std::vector<DType>{type});
  }
  programs.emplace_back("d=5 x0 x0 add x0 mul x0 maximum x0 minimum x0 xor x0 abs and not x0 x0 not where",
                        std::vector<DType>{DType::b8});
  // Complex numbers: arithmetic, the elementwise functions, real/imag/conj, casts both ways.
  for (const auto& [code, type, other] : {std::tuple{"c64", DType::c64, "c128"}, std::tuple{"c128", DType::c128, "c64"}}) {
    programs.emplace_back(
        fmt::format("d=5 x0 x0 eq x0 isnan or x0 isfinite and x0 x0 ne or "
                    "x0 x0 add x0 mul x0 div x0 sub x0 pow neg x0 square add x0 exp add x0 log add x0 log1p add "
                    "x0 sqrt add x0 sin add x0 cos add x0 tanh add x0 sign add x0 conj add {0}:1.5,-2 add "
                    "x0 tan add x0 asin add x0 acos add x0 atan add x0 sinh add x0 cosh add x0 asinh add "
                    "x0 acosh add x0 atanh add x0 expm1 add x0 log2 add x0 log10 add x0 round add x0 where "
                    "x0 abs as:{0} add x0 real x0 imag add as:{0} add as:f64 as:{0} as:{1} as:i32 as:{0} as:b8 as:{0}",
                    code, other),
        std::vector<DType>{type});
  }
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
  std::vector<Case> cases{
      {"d=40,6 y=0,0 f=add x0 as:f64", {DType::f32}, DType::f64},
      {"d=40,6 y=0,1 f=add x0 x0 mul as:f64", {DType::f32}, DType::f64},
      {"d=40,6 y=0,1 f=max x0", {DType::f32}, DType::f32},
      {"d=40,6 y=0,0 f=min x0", {DType::f64}, DType::f64},
      {"d=7,3 y=1,0 f=mul x0", {DType::f64}, DType::f64},
      {"d=9 y=0 f=add x0 as:i64", {DType::i32}, DType::i64},
      {"d=9,2 y=0,1 f=max x0", {DType::i32}, DType::i32},
      {"d=9,2 y=0,1 f=min x0", {DType::i64}, DType::i64},
      {"d=9,2 y=0,1 f=mul x0", {DType::i64}, DType::i64},
      {"d=9,2 y=0,1 f=min x0 f32:0 ne", {DType::f32}, DType::b8},  // all
      {"d=9 y=0 f=max x0 f32:0 ne", {DType::f32}, DType::b8},      // any
  };
  cases.push_back({"d=9 y=0 f=add x0", {DType::c64}, DType::c64});
  cases.push_back({"d=9,2 y=0,1 f=add x0 x0 mul", {DType::c128}, DType::c128});
  for (DType t : {DType::i8, DType::i16, DType::u8, DType::u16, DType::u32, DType::u64, DType::b8}) {
    for (const char* f : {"add", "mul", "min", "max"}) {
      cases.push_back({fmt::format("d=9 y=0 f={} x0", f), {t}, t});
      cases.push_back({fmt::format("d=9,2 y=0,1 f={} x0", f), {t}, t});
    }
  }
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
