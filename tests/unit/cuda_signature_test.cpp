// Kernels from CUDA source without a GPU: reading the entry's signature from
// the source, the definition built from it, the checks a call goes through,
// the bytes each argument is passed as and the automatic launch.
#include "cuda_source/cuda_signature.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/ferry.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "runtime_test_support.hpp"
#include "saxpy_cuda_source.hpp"

namespace ferry {
namespace {

using detail::CType;
using detail::parse_cuda_signature;

const char* const saxpy = testing::saxpy_cuda_source;

// What check_arguments sees at submission: shapes and modes, no data.
Arg buffer(DType dtype, std::size_t n, AccessMode mode) { return Arg{BufferArg{nullptr, dtype, 1, n, n, mode}}; }
Arg view(DType dtype, std::size_t rows, std::size_t cols, std::size_t ld, AccessMode mode) {
  return Arg{BufferArg{nullptr, dtype, rows, cols, ld, mode}};
}
Arg real(double v) { return Arg{ScalarValue{v}}; }
Arg integer(std::int64_t v) { return Arg{ScalarValue{v}}; }

KernelArgs call(std::vector<Arg> items) {
  KernelArgs args;
  args.items = std::move(items);
  return args;
}

// check_arguments must refuse with a UsageError containing `part`.
void expect_refused(const KernelDef& def, std::vector<Arg> items, const std::string& part) {
  KernelArgs args = call(std::move(items));
  try {
    check_arguments(def, args, "t");
    ADD_FAILURE() << "accepted; expected an error mentioning \"" << part << "\"";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::string parse_error(std::string_view source, std::string_view entry) {
  try {
    parse_cuda_signature(source, entry);
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed; expected a UsageError";
  return {};
}

// ---- the signature ----

TEST(CudaSignature, PointersAndScalars) {
  const auto sig = parse_cuda_signature(saxpy, "saxpy");
  EXPECT_EQ(sig.entry, "saxpy");
  ASSERT_EQ(sig.params.size(), 4u);
  EXPECT_EQ(sig.params[0].name, "n");
  EXPECT_FALSE(sig.params[0].pointer);
  EXPECT_EQ(sig.params[0].type, CType::i32);
  EXPECT_EQ(sig.params[1].type, CType::f32);
  EXPECT_TRUE(sig.params[2].pointer);
  EXPECT_TRUE(sig.params[2].const_pointee);
  EXPECT_EQ(sig.params[2].type, CType::f32);
  EXPECT_EQ(sig.params[3].name, "y");
  EXPECT_TRUE(sig.params[3].pointer);
  EXPECT_FALSE(sig.params[3].const_pointee);
}

TEST(CudaSignature, ConstPlacement) {
  const auto sig = parse_cuda_signature(
      "__global__ void k(float const* a, float* const b, const float* const c, volatile double* d) {}", "k");
  ASSERT_EQ(sig.params.size(), 4u);
  EXPECT_TRUE(sig.params[0].const_pointee);   // the data is const
  EXPECT_FALSE(sig.params[1].const_pointee);  // only the pointer is
  EXPECT_TRUE(sig.params[2].const_pointee);
  EXPECT_FALSE(sig.params[3].const_pointee);
  EXPECT_EQ(sig.params[3].type, CType::f64);
}

TEST(CudaSignature, CommentsStringsAndDirectivesAreSkipped) {
  const char* source = R"src(
// __global__ void scale(double* wrong) {}
/* __global__ void scale(int* wrong) {} */
#define SCALE_DECL __global__ void scale(char* wrong) \
    {}
#include <cuda_fp16.h>
__device__ const char* names[] = {"__global__ void scale(short* wrong) {}", R"x(scale(long* wrong))x"};
__device__ char quote = '"';
extern "C" __global__ void scale(/* the input */ const double* in, // in
                                 double* out, /* factor: */ double f) {
  out[threadIdx.x] = f * in[threadIdx.x];
}
)src";
  const auto sig = parse_cuda_signature(source, "scale");
  ASSERT_EQ(sig.params.size(), 3u);
  EXPECT_EQ(sig.params[0].name, "in");
  EXPECT_EQ(sig.params[0].type, CType::f64);
  EXPECT_EQ(sig.params[1].name, "out");
  EXPECT_EQ(sig.params[2].name, "f");
  EXPECT_EQ(sig.params[2].type, CType::f64);
}

TEST(CudaSignature, TemplatesElsewhereInTheSource) {
  const char* source = R"(
template <typename T, int N = 4>
__device__ T twice(T v) { return v + v; }
template <typename T>
__global__ void generic(T* data, int n) { if (threadIdx.x < n) data[threadIdx.x] = twice(data[threadIdx.x]); }
template __global__ void generic<float>(float*, int);
extern "C" __global__ void doubled(float* data, int n) { if (threadIdx.x < n) data[threadIdx.x] = twice<float, 2>(data[threadIdx.x]); }
)";
  const auto sig = parse_cuda_signature(source, "doubled");
  ASSERT_EQ(sig.params.size(), 2u);
  EXPECT_EQ(sig.params[0].name, "data");
  EXPECT_EQ(sig.params[1].type, CType::i32);
  EXPECT_NE(parse_error(source, "generic").find("template"), std::string::npos);
}

TEST(CudaSignature, MultipleKernelsInOneSource) {
  const char* source = R"(
extern "C" {
__global__ void first(const int* in, int* out) { out[0] = in[0]; }
__global__ void second(long long* values, unsigned long long count) {}
}
__global__ void third() {}
)";
  EXPECT_EQ(parse_cuda_signature(source, "first").params.size(), 2u);
  const auto second = parse_cuda_signature(source, "second");
  ASSERT_EQ(second.params.size(), 2u);
  EXPECT_EQ(second.params[0].type, CType::i64);
  EXPECT_EQ(second.params[1].type, CType::u64);
  EXPECT_TRUE(parse_cuda_signature(source, "third").params.empty());
}

TEST(CudaSignature, DeclarationThenDefinitionAndUnnamedParameters) {
  const char* source = R"(
__global__ void k(const float*, float*, int);
__global__ void __launch_bounds__(256) k(const float* x, float* y, int n) {}
__global__ void anonymous(const float*, float* y, unsigned int) {}
)";
  const auto sig = parse_cuda_signature(source, "k");
  ASSERT_EQ(sig.params.size(), 3u);
  EXPECT_EQ(sig.params[0].name, "x");  // the definition's names
  const auto anon = parse_cuda_signature(source, "anonymous");
  ASSERT_EQ(anon.params.size(), 3u);
  EXPECT_EQ(anon.params[0].name, "arg1");
  EXPECT_EQ(anon.params[1].name, "y");
  EXPECT_EQ(anon.params[2].name, "arg3");
  EXPECT_EQ(anon.params[2].type, CType::u32);
}

TEST(CudaSignature, EveryScalarType) {
  struct Case {
    const char* spelling;
    CType type;
  };
  const Case cases[] = {
      {"float", CType::f32},         {"double", CType::f64},
      {"int", CType::i32},           {"signed", CType::i32},
      {"signed int", CType::i32},    {"unsigned", CType::u32},
      {"unsigned int", CType::u32},  {"long", CType::i64},
      {"long int", CType::i64},      {"long long", CType::i64},
      {"long long int", CType::i64}, {"unsigned long long", CType::u64},
      {"long unsigned int", CType::u64}, {"short", CType::i16},
      {"unsigned short", CType::u16}, {"char", CType::i8},
      {"signed char", CType::i8},    {"unsigned char", CType::u8},
      {"bool", CType::boolean},      {"size_t", CType::u64},
      {"std::size_t", CType::u64},   {"::size_t", CType::u64},
      {"ptrdiff_t", CType::i64},     {"int8_t", CType::i8},
      {"uint8_t", CType::u8},        {"int16_t", CType::i16},
      {"uint16_t", CType::u16},      {"int32_t", CType::i32},
      {"uint32_t", CType::u32},      {"int64_t", CType::i64},
      {"std::int64_t", CType::i64},  {"uint64_t", CType::u64},
      {"const int", CType::i32},     {"const __grid_constant__ double", CType::f64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spelling);
    const std::string source = std::string("__global__ void k(") + c.spelling + " v) {}";
    const auto sig = parse_cuda_signature(source, "k");
    ASSERT_EQ(sig.params.size(), 1u);
    EXPECT_EQ(sig.params[0].name, "v");
    EXPECT_FALSE(sig.params[0].pointer);
    EXPECT_EQ(sig.params[0].type, c.type);
  }
}

TEST(CudaSignature, PointeeTypesMapToBufferTypes) {
  const auto sig = parse_cuda_signature(
      "__global__ void k(float* a, double* b, int* c, long long* d, unsigned char* e, unsigned* f, uint64_t* g, "
      "void* h, const char* i) {}",
      "k");
  ASSERT_EQ(sig.params.size(), 9u);
  const std::vector<std::vector<DType>> expected = {{DType::f32},
                                                    {DType::f64},
                                                    {DType::i32},
                                                    {DType::i64},
                                                    {DType::u8, DType::b8},
                                                    {DType::u32, DType::i32},
                                                    {DType::u64, DType::i64},
                                                    {},
                                                    {DType::i8, DType::u8}};
  for (std::size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(detail::buffer_dtypes(sig.params[i].type), expected[i]) << sig.params[i].name;
}

TEST(CudaSignature, TypesFerryCannotPass) {
  const std::string complex = parse_error("__global__ void scale(float* x, std::complex<float> n) {}", "scale");
  EXPECT_NE(complex.find("cuda_kernel 'scale': parameter 2 'n' has type 'std::complex<float>', which Ferry cannot pass"),
            std::string::npos)
      << complex;
  EXPECT_NE(complex.find("pointer to float, double, int, long long or unsigned char"), std::string::npos) << complex;
  EXPECT_NE(parse_error("__global__ void k(float** p) {}", "k").find("a pointer to a pointer"), std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(float& r) {}", "k").find("a reference"), std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(int n, __half h) {}", "k").find("parameter 2 'h' has type '__half'"),
            std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(short* p) {}", "k").find("16-bit"), std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(long double v) {}", "k").find("'long double'"), std::string::npos);
  EXPECT_NE(parse_error("struct P { int a; };\n__global__ void k(P p) {}", "k").find("type 'P'"), std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(float* grid_x) {}", "k").find("reserves"), std::string::npos);
  EXPECT_NE(parse_error("__global__ void k(int a, float a) {}", "k").find("both named 'a'"), std::string::npos);
}

TEST(CudaSignature, MissingEntry) {
  const std::string missing = parse_error(saxpy, "scale");
  EXPECT_NE(missing.find("cuda_kernel 'scale': the source has no __global__ function named 'scale'"), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("its kernels: saxpy"), std::string::npos) << missing;
  const std::string host = parse_error("__device__ float scale(float v) { return 2 * v; }", "scale");
  EXPECT_NE(host.find("not declared __global__"), std::string::npos) << host;
  EXPECT_NE(parse_error(saxpy, "").find("empty"), std::string::npos);
  EXPECT_NE(parse_error(saxpy, "sax py").find("C identifier"), std::string::npos);
  const std::string twice = parse_error("__global__ void k(int* a) {}\n__global__ void k(float* a) {}", "k");
  EXPECT_NE(twice.find("overloads"), std::string::npos) << twice;
}

// ---- the definition ----

TEST(CudaSourceKernel, DefinitionFromTheSignature) {
  const KernelDef def = make_cuda_source_kernel(CudaSource{saxpy, "saxpy", {"-use_fast_math"}});
  EXPECT_EQ(def.name, "saxpy");
  ASSERT_TRUE(def.cuda_source);
  EXPECT_EQ(def.cuda_source->entry, "saxpy");
  EXPECT_EQ(def.cuda_source->options, std::vector<std::string>{"-use_fast_math"});
  EXPECT_FALSE(def.cpu);  // CUDA source never runs on the CPU
  EXPECT_TRUE(def.cuda);
  ASSERT_EQ(def.params.size(), 4u + detail::launch_param_names.size());
  EXPECT_EQ(def.params[0].kind, ParamKind::integer);
  EXPECT_EQ(def.params[1].kind, ParamKind::real);
  EXPECT_EQ(def.params[2].kind, ParamKind::buffer);
  EXPECT_EQ(def.params[2].mode, AccessMode::read);
  EXPECT_EQ(def.params[2].dtypes, std::vector<DType>{DType::f32});
  EXPECT_EQ(def.params[3].mode, AccessMode::readwrite);
  for (std::size_t k = 0; k < detail::launch_param_names.size(); ++k) {
    const Param& p = def.params[4 + k];
    EXPECT_EQ(p.name, detail::launch_param_names[k]);
    EXPECT_EQ(p.kind, ParamKind::integer);
    ASSERT_TRUE(p.default_value.has_value());
    EXPECT_EQ(std::get<std::int64_t>(*p.default_value), 0);
  }
}

TEST(CudaSourceKernel, WritesOverrideReadwrite) {
  const KernelDef def = make_cuda_source_kernel(CudaSource{saxpy, "saxpy", {}}, {"y"});
  EXPECT_EQ(def.params[3].mode, AccessMode::write);
  const auto refused = [](std::vector<std::string> writes) {
    try {
      make_cuda_source_kernel(CudaSource{saxpy, "saxpy", {}}, std::move(writes));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({"x"}).find("points to const"), std::string::npos);
  EXPECT_NE(refused({"n"}).find("not a pointer"), std::string::npos);
  EXPECT_NE(refused({"z"}).find("writes names 'z', which is not one of its parameters"), std::string::npos);
}

TEST(CudaSourceKernel, CallsAreCheckedAgainstTheSignature) {
  const KernelDef def = make_cuda_source_kernel(CudaSource{saxpy, "saxpy", {}}, {"y"});
  // A fitting call: the launch values are filled with their defaults.
  KernelArgs ok = call({integer(1000), real(2.0), buffer(DType::f32, 1000, AccessMode::read),
                        buffer(DType::f32, 1000, AccessMode::write)});
  ASSERT_NO_THROW(check_arguments(def, ok, "t"));
  EXPECT_EQ(ok.size(), def.params.size());
  // An integer for a float converts; a float for an int does not.
  KernelArgs converted = call({integer(3), integer(2), buffer(DType::f32, 3, AccessMode::read),
                               buffer(DType::f32, 3, AccessMode::readwrite)});
  EXPECT_NO_THROW(check_arguments(def, converted, "t"));

  expect_refused(def, {integer(1000), real(2.0), buffer(DType::f64, 1000, AccessMode::read), buffer(DType::f32, 1000, AccessMode::write)},
                 "argument 3 'x' has element type float64; the kernel accepts float32");
  expect_refused(def, {integer(1000), real(2.0), buffer(DType::f32, 1000, AccessMode::read), buffer(DType::f32, 1000, AccessMode::read)},
                 "argument 4 'y' is written by the kernel but passed as read");
  expect_refused(def, {real(1.5), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write)},
                 "argument 1 'n' must be an integer");
  expect_refused(def, {integer(std::int64_t{1} << 40), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write)},
                 "argument 1 'n' is 1099511627776, which does not fit in the kernel's int");
  expect_refused(def, {integer(8), real(1e300), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write)},
                 "does not fit in the kernel's float");
  expect_refused(def, {integer(8), real(2.0), buffer(DType::f32, 8, AccessMode::read)}, "argument 4 'y' is missing");
  expect_refused(def, {integer(8), real(2.0), view(DType::f32, 4, 2, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write)},
                 "argument 3 'x' is a 4 x 2 view whose rows are 8 elements apart");
  expect_refused(def, {integer(8), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write),
                       integer(0), integer(0), integer(0), integer(2048)},
                 "argument 8 'block_x' is 2048; CUDA allows at most 1024");
  expect_refused(def, {integer(8), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write),
                       integer(0), integer(0), integer(0), integer(64), integer(64)},
                 "= 4096 threads");
  expect_refused(def, {integer(8), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write),
                       integer(-1)},
                 "argument 5 'grid_x' is -1");
  expect_refused(def, {integer(8), real(2.0), buffer(DType::f32, 8, AccessMode::read), buffer(DType::f32, 8, AccessMode::write),
                       integer(1), integer(70000)},
                 "'grid_y' is 70000; CUDA allows at most 65535");

  const KernelDef sizes = make_cuda_source_kernel(
      CudaSource{"__global__ void k(unsigned u, bool b, unsigned char c, void* any) {}", "k", {}});
  expect_refused(sizes, {integer(-1), integer(0), integer(0), buffer(DType::f64, 2, AccessMode::readwrite)},
                 "argument 1 'u' is -1, which does not fit in the kernel's unsigned");
  expect_refused(sizes, {integer(1), integer(2), integer(0), buffer(DType::f64, 2, AccessMode::readwrite)},
                 "argument 2 'b' is 2");
  expect_refused(sizes, {integer(1), integer(1), integer(256), buffer(DType::f64, 2, AccessMode::readwrite)},
                 "argument 3 'c' is 256");
  KernelArgs any_dtype = call({integer(1), integer(1), integer(255), buffer(DType::i64, 2, AccessMode::readwrite)});
  EXPECT_NO_THROW(check_arguments(sizes, any_dtype, "t"));  // void* takes any element type
}

// ---- the launch and the argument bytes ----

TEST(CudaSourceKernel, AutomaticAndExplicitLaunch) {
  const auto sig = parse_cuda_signature(saxpy, "saxpy");
  const auto launch_for = [&](std::size_t n, std::vector<std::int64_t> values) {
    KernelArgs args = call({integer(static_cast<std::int64_t>(n)), real(1.0), buffer(DType::f32, n, AccessMode::read),
                            buffer(DType::f32, n, AccessMode::readwrite)});
    for (auto v : values) args.items.push_back(integer(v));
    return detail::resolve_launch(sig, args);
  };
  CudaLaunch l = launch_for(1000, {});
  EXPECT_EQ(l.grid[0], 4u);  // ceil(1000 / 256)
  EXPECT_EQ(l.grid[1], 1u);
  EXPECT_EQ(l.grid[2], 1u);
  EXPECT_EQ(l.block[0], 256u);
  EXPECT_EQ(l.block[1], 1u);
  EXPECT_EQ(l.shared_bytes, 0u);
  EXPECT_EQ(launch_for(0, {}).grid[0], 1u);  // an empty buffer still launches one block
  EXPECT_EQ(launch_for(1024, {}).grid[0], 4u);
  EXPECT_EQ(launch_for(1025, {}).grid[0], 5u);
  l = launch_for(1000, {0, 0, 0, 128});
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.grid[0], 8u);  // the grid still covers the elements
  l = launch_for(1000, {0, 0, 0, 16, 16});
  EXPECT_EQ(l.block[1], 16u);
  EXPECT_EQ(l.grid[0], 4u);  // 256 threads a block
  l = launch_for(1000, {7, 2, 0, 0, 0, 0, 4096});
  EXPECT_EQ(l.grid[0], 7u);
  EXPECT_EQ(l.grid[1], 2u);
  EXPECT_EQ(l.grid[2], 1u);
  EXPECT_EQ(l.block[0], 256u);
  EXPECT_EQ(l.shared_bytes, 4096u);

  const auto no_buffers = parse_cuda_signature("__global__ void k(int n) {}", "k");
  KernelArgs args = call({integer(1)});
  EXPECT_THROW(detail::resolve_launch(no_buffers, args), UsageError);
  args.items.push_back(integer(3));
  EXPECT_EQ(detail::resolve_launch(no_buffers, args).grid[0], 3u);
}

template <typename T>
bool holds(std::uint64_t slot, T value) {
  std::uint64_t expected = 0;
  std::memcpy(&expected, &value, sizeof value);
  return slot == expected;
}

TEST(CudaSourceKernel, ArgumentsArePackedAsTheirExactCType) {
  const auto sig = parse_cuda_signature(
      "__global__ void k(float f, double d, int i, unsigned u, long long l, unsigned char c, bool b, short s, "
      "size_t z, float* p) {}",
      "k");
  float data[4] = {};
  KernelArgs args = call({real(2.5), real(-0.125), integer(-3), integer(4000000000), integer(-(std::int64_t{1} << 40)),
                          integer(200), integer(1), integer(-7), integer(123456789012), buffer(DType::f32, 4, AccessMode::readwrite)});
  std::get<BufferArg>(args.items[9]).data = data;
  const detail::PackedArguments packed = detail::pack_arguments(sig, args);
  ASSERT_EQ(packed.slots.size(), 10u);
  ASSERT_EQ(packed.pointers.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(packed.pointers[i], &packed.slots[i]);
  EXPECT_TRUE(holds(packed.slots[0], 2.5f));
  EXPECT_TRUE(holds(packed.slots[1], -0.125));
  EXPECT_TRUE(holds(packed.slots[2], std::int32_t{-3}));
  EXPECT_TRUE(holds(packed.slots[3], std::uint32_t{4000000000u}));
  EXPECT_TRUE(holds(packed.slots[4], -(std::int64_t{1} << 40)));
  EXPECT_TRUE(holds(packed.slots[5], std::uint8_t{200}));
  EXPECT_TRUE(holds(packed.slots[6], true));
  EXPECT_TRUE(holds(packed.slots[7], std::int16_t{-7}));
  EXPECT_TRUE(holds(packed.slots[8], std::uint64_t{123456789012}));
  EXPECT_TRUE(holds(packed.slots[9], static_cast<void*>(data)));
}

// ---- through a runtime ----

TEST(CudaSourceKernel, RuntimeRegistersItAndRefusesWhatItCannotParse) {
  Runtime rt(testing::quiet_options(1));
  const KernelRef k = rt.cuda_kernel(saxpy, "saxpy", {"y"});
  ASSERT_TRUE(k.def);
  EXPECT_EQ(rt.find_kernel("saxpy").def, k.def);
  ASSERT_TRUE(k.def->cuda_source);
  EXPECT_EQ(k.def->params[3].mode, AccessMode::write);
  try {
    rt.cuda_kernel("__global__ void scale(float* x, std::complex<float> n) {}", "scale");
    ADD_FAILURE() << "accepted a parameter Ferry cannot pass";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_kernel 'scale': parameter 2 'n' has type 'std::complex<float>'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rt.cuda_kernel(saxpy, "missing"), UsageError);
  EXPECT_THROW(rt.cuda_kernel(saxpy, "saxpy"), UsageError);  // the name is taken

  auto x = rt.buffer<float>(16);
  auto y = rt.buffer<float>(16);
  auto wrong = rt.buffer<double>(16);
  try {
    rt.submit(k, 16, 2.0f, read(wrong), write(y));
    ADD_FAILURE() << "accepted an f64 buffer for a float*";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("argument 3 'x' has element type float64"), std::string::npos) << e.what();
  }
  if (cuda::device_count() == 0) {
    // No GPU and no remote: nothing here can run CUDA source, and submit says so before anything runs.
    try {
      rt.submit(k, 16, 2.0f, read(x), write(y));
      ADD_FAILURE() << "a runtime without GPUs accepted a CUDA source task";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("no device of this runtime can run it"), std::string::npos) << e.what();
    }
  }
}

#if !FERRY_WITH_CUDA
TEST(CudaSourceKernel, BuildWithoutCudaSaysSoWhenCalledLocally) {
  const KernelDef def = make_cuda_source_kernel(CudaSource{saxpy, "saxpy", {}});
  KernelArgs args;
  std::string name = "t";
  ExecContext ctx{args, name, -1, nullptr, 0, std::nullopt};
  try {
    def.cuda(ctx);
    ADD_FAILURE() << "ran CUDA source in a build without CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FERRY_WITH_CUDA=OFF"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace ferry
