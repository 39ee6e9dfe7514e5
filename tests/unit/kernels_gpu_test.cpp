// The CUDA variant of every built-in kernel against its CPU variant (ctest
// label gpu): same arguments, host copies for the CPU and device copies for
// the GPU, then the results compared element by element. Matrices live in a
// larger backing with margins where a view is a tile (ld > cols); a margin
// must come back bit for bit as it went in. Skips where there is no device.
#include <gtest/gtest.h>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"

#if !FERRY_WITH_CUDA

TEST(KernelsGpu, NeedsACudaBuild) { GTEST_SKIP() << ferry::cuda::unavailable_reason(); }

#else

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/allocator/device_pool.hpp"
#include "ferry/detail/cuda_check.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace {

using ferry::AccessMode;
using ferry::Arg;
using ferry::BufferArg;
using ferry::KernelArgs;
using ferry::detail::check_cuda;

// Short names for the access modes (not read/write: POSIX has those).
constexpr AccessMode in = AccessMode::read;
constexpr AccessMode out = AccessMode::write;
constexpr AccessMode inout = AccessMode::readwrite;

template <typename T>
constexpr double eps = std::numeric_limits<T>::epsilon();

// BLAS-1 and elementwise results: each element is one or two roundings, and
// the device math library (exp, log, sqrt) is within a few ulps of glibc, so
// a relative 1e-5 (f32) / 1e-12 (f64) leaves room without hiding real errors.
template <typename T>
constexpr double elementwise_tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;

struct Shape {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool tile = false;  // a view into a larger backing: ld > cols, margins around it
};

std::string describe(const Shape& s) {
  return std::to_string(s.rows) + " x " + std::to_string(s.cols) + (s.tile ? " tile" : "");
}

template <typename T>
T random_value(std::mt19937& gen, double lo, double hi) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::uniform_real_distribution<double>(lo, hi)(gen));
  } else {
    return static_cast<T>(std::uniform_int_distribution<long long>(std::llround(lo), std::llround(hi))(gen));
  }
}

template <typename T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// One matrix twice: `host` for the CPU variant, a device copy for the CUDA
// one, with the same layout so results compare index by index.
template <typename T>
class Twin {
  // Declared before `host`, whose size they give.
  Shape shape_;
  std::size_t ld_;
  std::size_t origin_;

 public:
  explicit Twin(Shape shape)
      : shape_(shape),
        ld_(shape.cols + (shape.tile ? 5 : 0)),
        origin_(shape.tile ? 1 * ld_ + 2 : 0),
        host((shape.rows + (shape.tile ? 3 : 0)) * ld_) {
    void* memory = nullptr;
    check_cuda(cudaMalloc(&memory, std::max<std::size_t>(bytes(), 1)), "cudaMalloc");
    device_ = static_cast<T*>(memory);
  }
  ~Twin() { (void)cudaFree(device_); }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

  T& at(std::size_t i, std::size_t j) { return host[origin_ + i * ld_ + j]; }
  const T& at(std::size_t i, std::size_t j) const { return host[origin_ + i * ld_ + j]; }
  std::size_t rows() const { return shape_.rows; }
  std::size_t cols() const { return shape_.cols; }

  // Margins too, so that a stray write there shows.
  void randomize(unsigned seed, double lo = -1, double hi = 1) {
    std::mt19937 gen(seed);
    for (T& v : host) v = random_value<T>(gen, lo, hi);
  }
  void upload() { check_cuda(cudaMemcpy(device_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy"); }
  std::vector<T> download() const {
    std::vector<T> result(host.size());
    check_cuda(cudaMemcpy(result.data(), device_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return result;
  }

  BufferArg cpu(AccessMode mode) { return {host.data() + origin_, ferry::dtype_of<T>(), rows(), cols(), ld_, mode}; }
  BufferArg gpu(AccessMode mode) { return {device_ + origin_, ferry::dtype_of<T>(), rows(), cols(), ld_, mode}; }

  // (i, j) in the view of backing index k; nothing for a margin.
  std::optional<std::pair<std::size_t, std::size_t>> position(std::size_t k) const {
    if (k < origin_) return std::nullopt;
    const std::size_t i = (k - origin_) / ld_, j = (k - origin_) % ld_;
    if (i >= rows() || j >= cols()) return std::nullopt;
    return std::pair{i, j};
  }

  std::vector<T> host;

 private:
  std::size_t bytes() const { return host.size() * sizeof(T); }

  T* device_ = nullptr;
};

// The GPU's copy against the CPU's: margins bit for bit, the view through
// close(i, j, cpu, gpu). Reports the first few mismatches.
template <typename T, typename Close>
void expect_agree(const Twin<T>& t, const char* what, Close close) {
  const std::vector<T> gpu = t.download();
  int mismatches = 0;
  for (std::size_t k = 0; k < gpu.size(); ++k) {
    const auto where = t.position(k);
    const bool ok = where ? close(where->first, where->second, t.host[k], gpu[k]) : same_bits(t.host[k], gpu[k]);
    if (!ok && ++mismatches <= 5) {
      ADD_FAILURE() << what << (where ? " (" + std::to_string(where->first) + ", " + std::to_string(where->second) + ")"
                                      : " margin element " + std::to_string(k))
                    << ": cpu " << static_cast<double>(t.host[k]) << ", gpu " << static_cast<double>(gpu[k]);
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements that differ";
}

auto exact() {
  return [](std::size_t, std::size_t, auto cpu, auto gpu) { return same_bits(cpu, gpu); };
}
auto relative(double tol) {
  return [tol](std::size_t, std::size_t, auto cpu, auto gpu) {
    const double c = static_cast<double>(cpu), g = static_cast<double>(gpu);
    return std::abs(g - c) <= tol * std::max(1.0, std::abs(c));
  };
}
auto absolute(double tol) {
  return [tol](std::size_t, std::size_t, auto cpu, auto gpu) {
    return std::abs(static_cast<double>(gpu) - static_cast<double>(cpu)) <= tol;
  };
}
// For triangular kernels: the lower triangle (with the diagonal) through
// `close`, the strict upper one must be untouched (bit for bit).
template <typename Close>
auto lower(Close close) {
  return [close](std::size_t i, std::size_t j, auto cpu, auto gpu) {
    return j > i ? same_bits(cpu, gpu) : close(i, j, cpu, gpu);
  };
}

// The same call twice: host pointers for the CPU, device pointers for the GPU.
struct Call {
  std::vector<Arg> cpu;
  std::vector<Arg> gpu;

  template <typename T>
  Call& buffer(Twin<T>& t, AccessMode mode) {
    cpu.push_back(Arg{t.cpu(mode)});
    gpu.push_back(Arg{t.gpu(mode)});
    return *this;
  }
  Call& real(double v) { return scalar(v); }
  Call& integer(std::int64_t v) { return scalar(v); }
  Call& text(std::string v) { return scalar(std::move(v)); }

 private:
  // Assigned, not brace-built: GCC 12 under sanitizers warns about variant temporaries.
  template <typename V>
  Call& scalar(V v) {
    Arg a;
    a.emplace<ferry::ScalarValue>(std::move(v));
    cpu.push_back(a);
    gpu.push_back(a);
    return *this;
  }
};

const ferry::KernelDef& kernel(const std::string& name) {
  const ferry::KernelDef* k = ferry::KernelRegistry::global().find(name);
  if (k == nullptr) throw std::runtime_error("no kernel " + name);
  if (!k->cuda) throw std::runtime_error("kernel " + name + " has no CUDA variant");
  return *k;
}

struct Results {
  std::optional<double> cpu;
  std::optional<double> gpu;
};

class KernelsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
    check_cuda(cudaSetDevice(0), "cudaSetDevice");
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    scratch_ = std::make_unique<ferry::DevicePool>();
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    scratch_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  std::optional<double> run_cpu(const std::string& name, std::vector<Arg> items) {
    KernelArgs args{std::move(items)};
    ferry::check_arguments(kernel(name), args, name);
    ferry::ExecContext ctx{.args = args, .task_name = name, .worker = 0, .stream = nullptr, .device = -1,
                           .result = std::nullopt};
    kernel(name).cpu(ctx);
    return ctx.result;
  }

  // As the CUDA executor calls it: device 0 current, the stream in ctx.
  std::optional<double> run_gpu(const std::string& name, std::vector<Arg> items) {
    KernelArgs args{std::move(items)};
    ferry::check_arguments(kernel(name), args, name);
    ferry::ExecContext ctx{.args = args, .task_name = name, .worker = -1, .stream = stream_, .device = 0,
                           .result = std::nullopt, .scratch = scratch_.get()};
    kernel(name).cuda(ctx);
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return ctx.result;
  }

  Results run(const std::string& name, const Call& call) {
    Results r;
    r.cpu = run_cpu(name, call.cpu);
    r.gpu = run_gpu(name, call.gpu);
    return r;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<ferry::DevicePool> scratch_;  // where the variants take their temporary memory
};

template <typename T>
class KernelsGpuFloating : public KernelsGpu {};
using FloatingTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelsGpuFloating, FloatingTypes);

template <typename T>
class KernelsGpuNumeric : public KernelsGpu {};
using NumericTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, std::uint8_t>;
TYPED_TEST_SUITE(KernelsGpuNumeric, NumericTypes);

// A 1-D buffer (one row), a contiguous matrix, and a tile of a larger one.
const std::vector<Shape> blas1_shapes{{1, 1000}, {40, 50}, {40, 50, true}};

// ---- BLAS level 1 ----

TYPED_TEST(KernelsGpuFloating, AxpyAgrees) {
  using T = TypeParam;
  for (const Shape& s : blas1_shapes) {
    SCOPED_TRACE(describe(s));
    Twin<T> x(s), y(s);
    x.randomize(1);
    y.randomize(2);
    x.upload();
    y.upload();
    this->run("axpy", Call().buffer(x, in).buffer(y, inout).real(0.75));
    expect_agree(y, "y", relative(elementwise_tol<T>));
    expect_agree(x, "x", exact());
  }
}

TYPED_TEST(KernelsGpuFloating, ScalAgrees) {
  using T = TypeParam;
  for (const Shape& s : blas1_shapes) {
    SCOPED_TRACE(describe(s));
    Twin<T> x(s);
    x.randomize(3);
    x.upload();
    this->run("scal", Call().buffer(x, inout).real(-1.5));
    expect_agree(x, "x", relative(elementwise_tol<T>));
  }
}

TYPED_TEST(KernelsGpuFloating, DotAgrees) {
  using T = TypeParam;
  // The last pair mixes a contiguous x with a tile y: the strided path.
  const std::vector<std::pair<Shape, Shape>> shapes{
      {blas1_shapes[0], blas1_shapes[0]}, {blas1_shapes[1], blas1_shapes[1]},
      {blas1_shapes[2], blas1_shapes[2]}, {blas1_shapes[1], blas1_shapes[2]}};
  for (const auto& [xs, ys] : shapes) {
    SCOPED_TRACE(describe(xs) + " . " + describe(ys));
    Twin<T> x(xs), y(ys);
    x.randomize(4);
    y.randomize(5);
    x.upload();
    y.upload();
    const Results r = this->run("dot", Call().buffer(x, in).buffer(y, in));
    ASSERT_TRUE(r.cpu && r.gpu);
    // Relative to sum |x y|, not to the result, which cancellation can make tiny.
    double magnitude = 0;
    for (std::size_t i = 0; i < xs.rows; ++i)
      for (std::size_t j = 0; j < xs.cols; ++j) magnitude += std::abs(double(x.at(i, j)) * double(y.at(i, j)));
    EXPECT_NEAR(*r.gpu, *r.cpu, elementwise_tol<T> * magnitude);
  }
}

// In float, 1e8 + 1 is 1e8: a float accumulator would lose every 1 below,
// a double one gets the sum exactly. Only the GPU is held to that: Debian's
// OpenBLAS (Haswell kernel) cblas_dsdot sums runs of 32 products in float
// (OpenMathLib/OpenBLAS#1329) and returns 2 instead of 333 for n = 1000.
TEST_F(KernelsGpu, DotOfFloatsAccumulatesInDouble) {
  for (const Shape& s : blas1_shapes) {
    SCOPED_TRACE(describe(s));
    Twin<float> x(s), y(s);
    x.randomize(6);
    y.randomize(7);
    const float pattern[] = {1e8f, 1.0f, -1e8f};
    double exact_sum = 0;  // integers below 2^53: exact in any order
    for (std::size_t i = 0; i < s.rows; ++i) {
      for (std::size_t j = 0; j < s.cols; ++j) {
        x.at(i, j) = pattern[(i * s.cols + j) % 3];
        y.at(i, j) = 1.0f;
        exact_sum += x.at(i, j);
      }
    }
    x.upload();
    y.upload();
    const Results r = run("dot", Call().buffer(x, in).buffer(y, in));
    ASSERT_TRUE(r.cpu && r.gpu);
    EXPECT_EQ(*r.gpu, exact_sum);
  }
}

// Scratch (here the reduction's partials and nrm2's packed copy) comes from
// the DevicePool in ExecContext::scratch and is all returned afterwards; a
// caller without a pool gets a UsageError, not memory from elsewhere.
TEST_F(KernelsGpu, ScratchComesFromTheDevicePool) {
  Twin<double> x(Shape{40, 30, true});
  x.randomize(21);
  x.upload();
  const Results r = run("sum", Call().buffer(x, in));
  ASSERT_TRUE(r.cpu && r.gpu);
  EXPECT_NEAR(*r.gpu, *r.cpu, 1e-12 * 1200);
  const Results norm = run("nrm2", Call().buffer(x, in));
  EXPECT_NEAR(*norm.gpu, *norm.cpu, 1e-12 * *norm.cpu);
  const auto stats = scratch_->stats();
  EXPECT_GE(stats.peak_bytes, 40 * 30 * sizeof(double)) << "nrm2 packs the tile in the pool";
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.blocks_in_use, 0u);

  KernelArgs args{Call().buffer(x, in).gpu};
  ferry::check_arguments(kernel("sum"), args, "sum");
  ferry::ExecContext ctx{.args = args, .task_name = "sum", .worker = -1, .stream = stream_, .device = 0,
                         .result = std::nullopt, .scratch = nullptr};
  EXPECT_THROW(kernel("sum").cuda(ctx), ferry::UsageError);
}

// cuBLAS handles are cached per stream. CUDA hands a destroyed stream's
// address to the next stream it creates more often than not: each new
// stream must still get a handle bound to itself (a stale one would enqueue
// on a destroyed stream), which the right dot product shows.
TEST_F(KernelsGpu, ANewStreamAtADestroyedStreamsAddressGetsItsOwnHandle) {
  Twin<double> x(Shape{1, 1000, false}), y(Shape{1, 1000, false});
  x.randomize(31);
  y.randomize(32);
  x.upload();
  y.upload();
  int reused = 0;
  for (int round = 0; round < 6; ++round) {
    const cudaStream_t old = stream_;
    check_cuda(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    stream_ = nullptr;
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    reused += stream_ == old;
    const Results r = run("dot", Call().buffer(x, in).buffer(y, in));  // cublasDdot on the new stream
    ASSERT_TRUE(r.cpu && r.gpu);
    EXPECT_NEAR(*r.gpu, *r.cpu, 1e-12 * 1000) << "round " << round;
  }
  std::cout << "[          ] a new stream took the destroyed one's address " << reused << " of 6 times\n";
}

TYPED_TEST(KernelsGpuFloating, Nrm2Agrees) {
  using T = TypeParam;
  for (const Shape& s : blas1_shapes) {
    SCOPED_TRACE(describe(s));
    Twin<T> x(s);
    x.randomize(8);
    x.upload();
    const Results r = this->run("nrm2", Call().buffer(x, in));
    ASSERT_TRUE(r.cpu && r.gpu);
    EXPECT_NEAR(*r.gpu, *r.cpu, elementwise_tol<T> * *r.cpu);
    expect_agree(x, "x", exact());
  }
}

// ---- gemm ----

// A wrong transpose or leading dimension gives O(1) errors. Rounding: each
// element is a k-term dot product of entries in [-1, 1], whose error grows
// like sqrt(k)·eps·sum|a||b| (<= k) in practice; 4x that, plus beta·|c|.
TYPED_TEST(KernelsGpuFloating, GemmAgreesForEveryTransposeAndLayout) {
  using T = TypeParam;
  constexpr std::size_t m = 33, n = 47, k = 29;
  for (const int trans_a : {0, 1}) {
    for (const int trans_b : {0, 1}) {
      for (const bool tile : {false, true}) {
        for (const auto& [alpha, beta] : {std::pair{-1.0, 1.0}, std::pair{0.5, 0.0}}) {
          SCOPED_TRACE(testing::Message() << "trans_a " << trans_a << ", trans_b " << trans_b << (tile ? ", tiles" : "")
                                          << ", alpha " << alpha << ", beta " << beta);
          Twin<T> a(trans_a ? Shape{k, m, tile} : Shape{m, k, tile});
          Twin<T> b(trans_b ? Shape{n, k, tile} : Shape{k, n, tile});
          Twin<T> c(Shape{m, n, tile});
          a.randomize(10);
          b.randomize(11);
          c.randomize(12);
          a.upload();
          b.upload();
          c.upload();
          this->run("gemm", Call()
                                .buffer(a, in)
                                .buffer(b, in)
                                .buffer(c, inout)
                                .real(alpha)
                                .real(beta)
                                .integer(trans_a)
                                .integer(trans_b));
          const double tol = 4 * std::sqrt(double(k)) * eps<T> * (std::abs(alpha) * double(k) + std::abs(beta));
          expect_agree(c, "c", absolute(tol));
          expect_agree(a, "a", exact());
          expect_agree(b, "b", exact());
        }
      }
    }
  }
}

// ---- the Cholesky tile kernels ----

// As samples/cholesky/tiled_cholesky.hpp (fill_spd): random symmetric plus
// n on the diagonal. The strict upper triangle then gets NaN: potrf may only
// read the lower one, and a NaN read would spread through the factor.
template <typename T>
void fill_spd_lower(Twin<T>& a, unsigned seed) {
  const std::size_t n = a.rows();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) a.at(i, j) = static_cast<T>(u(rng) + (i == j ? static_cast<double>(n) : 0.0));
    for (std::size_t j = i + 1; j < n; ++j) a.at(i, j) = std::numeric_limits<T>::quiet_NaN();
  }
}

// The diagonal n dominates the random off-diagonal part (its eigenvalues lie
// within about 2·sqrt(n) of n), so A is well conditioned and the two factors
// differ by a few n·eps·max|L|.
TYPED_TEST(KernelsGpuFloating, PotrfAgrees) {
  using T = TypeParam;
  constexpr std::size_t n = 48;
  for (const bool tile : {false, true}) {
    SCOPED_TRACE(tile ? "tile" : "contiguous");
    Twin<T> a(Shape{n, n, tile});
    a.randomize(13);
    fill_spd_lower(a, 14);
    a.upload();
    this->run("potrf", Call().buffer(a, inout));
    double largest = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j <= i; ++j) largest = std::max(largest, std::abs(double(a.at(i, j))));
    // Only the lower triangle is specified; cuSOLVER may use the other as scratch.
    expect_agree(a, "a", [tol = 8 * n * eps<T> * largest](std::size_t i, std::size_t j, T cpu, T gpu) {
      return j > i || std::abs(double(gpu) - double(cpu)) <= tol;
    });
  }
}

TYPED_TEST(KernelsGpuFloating, PotrfOfANonPositiveDefiniteMatrixThrowsAsOnTheCpu) {
  using T = TypeParam;
  Twin<T> a(Shape{6, 6});
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 6; ++j) a.at(i, j) = i == j ? T(1) : T(0);
  a.at(3, 3) = T(-1);
  a.upload();
  const auto message = [&](auto call) -> std::string {
    try {
      call();
    } catch (const ferry::Error& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  const std::string cpu = message([&] { this->run_cpu("potrf", Call().buffer(a, inout).cpu); });
  const std::string gpu = message([&] { this->run_gpu("potrf", Call().buffer(a, inout).gpu); });
  EXPECT_EQ(cpu, "potrf: the leading minor of order 4 is not positive definite");
  EXPECT_EQ(gpu, cpu);
}

// l = a well-conditioned lower factor (n on the diagonal), NaN above it:
// trsm may not read there. The solution's error is a few n·eps·max|x|.
// ---- decompositions (cuSOLVER's gesvdj, syevd, geqrf + orgqr against LAPACK) ----

// Singular vectors, eigenvectors and Householder factors are unique up to the
// sign of each vector, and the algorithms differ (Jacobi against divide and
// conquer), so vectors compare by magnitude; values directly. The random
// matrices have well separated singular values and eigenvalues.
auto magnitude(double tol) {
  return [tol](std::size_t, std::size_t, auto cpu, auto gpu) {
    return std::abs(std::abs(static_cast<double>(gpu)) - std::abs(static_cast<double>(cpu))) <= tol;
  };
}

TYPED_TEST(KernelsGpuFloating, DecompositionsAgree) {
  using T = TypeParam;
  const double tol = 200 * eps<T>, vectors = 2000 * eps<T>;
  for (const bool tile : {false, true}) {
    for (const auto& [m, n] : {std::pair<std::size_t, std::size_t>{9, 5}, std::pair<std::size_t, std::size_t>{5, 9}}) {
      SCOPED_TRACE(describe(Shape{m, n, tile}));
      const std::size_t k = std::min(m, n);
      Twin<T> a(Shape{m, n, tile}), s(Shape{1, k, tile}), u(Shape{m, k, tile}), vt(Shape{k, n, tile});
      Twin<T> q(Shape{m, k, tile}), r(Shape{k, n, tile});
      a.randomize(21), s.randomize(22), u.randomize(23), vt.randomize(24), q.randomize(25), r.randomize(26);
      for (Twin<T>* t : {&a, &s, &u, &vt, &q, &r}) t->upload();
      this->run("gesdd", Call().buffer(a, in).buffer(s, out).buffer(u, out).buffer(vt, out).integer(0));
      expect_agree(a, "a", exact());
      expect_agree(s, "s", relative(tol));
      expect_agree(u, "u", magnitude(vectors));
      expect_agree(vt, "vt", magnitude(vectors));
      this->run("geqrf", Call().buffer(a, in).buffer(q, out).buffer(r, out).integer(0));
      expect_agree(q, "q", magnitude(vectors));
      expect_agree(r, "r", magnitude(vectors));
    }
    constexpr std::size_t n = 7;
    Twin<T> a(Shape{n, n, tile}), w(Shape{1, n, tile}), v(Shape{n, n, tile});
    a.randomize(27), w.randomize(28), v.randomize(29);
    for (std::size_t i = 0; i < n; ++i) a.at(i, i) += static_cast<T>(3 * i);  // spread the eigenvalues
    a.upload(), w.upload(), v.upload();
    this->run("syevd", Call().buffer(a, in).buffer(w, out).buffer(v, out));
    expect_agree(w, "w", relative(tol));
    expect_agree(v, "v", magnitude(vectors));
  }
}

TYPED_TEST(KernelsGpuFloating, TrsmAgrees) {
  using T = TypeParam;
  constexpr std::size_t n = 24, m = 37;
  for (const bool tile : {false, true}) {
    SCOPED_TRACE(tile ? "tiles" : "contiguous");
    Twin<T> l(Shape{n, n, tile}), b(Shape{m, n, tile});
    l.randomize(15);
    fill_spd_lower(l, 16);
    b.randomize(17);
    l.upload();
    b.upload();
    this->run("trsm", Call().buffer(l, in).buffer(b, inout));
    double largest = 0;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) largest = std::max(largest, std::abs(double(b.at(i, j))));
    expect_agree(b, "b", absolute(8 * n * eps<T> * largest));
    expect_agree(l, "l", exact());
  }
}

// c's strict upper triangle holds NaN and must stay so; the lower one is a
// k-term update like gemm's, with the same rounding allowance.
TYPED_TEST(KernelsGpuFloating, SyrkAgrees) {
  using T = TypeParam;
  constexpr std::size_t n = 31, k = 19;
  for (const bool tile : {false, true}) {
    SCOPED_TRACE(tile ? "tiles" : "contiguous");
    Twin<T> a(Shape{n, k, tile}), c(Shape{n, n, tile});
    a.randomize(18);
    c.randomize(19);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) c.at(i, j) = std::numeric_limits<T>::quiet_NaN();
    a.upload();
    c.upload();
    this->run("syrk", Call().buffer(a, in).buffer(c, inout));
    expect_agree(c, "c", lower(absolute(4 * std::sqrt(double(k)) * eps<T> * (double(k) + 1))));
    expect_agree(a, "a", exact());
  }
}

// ---- elementwise ----

// More than 65535 rows: the grid's y extent is capped and must stride.
const std::vector<Shape> elementwise_shapes{{1, 1000}, {40, 50}, {40, 50, true}, {70000, 2, true}};

TYPED_TEST(KernelsGpuNumeric, FillAgrees) {
  using T = TypeParam;
  for (const Shape& s : elementwise_shapes) {
    SCOPED_TRACE(describe(s));
    Twin<T> x(s);
    x.randomize(20, 0, 100);
    x.upload();
    this->run("fill", Call().buffer(x, out).real(7));
    expect_agree(x, "x", exact());
    EXPECT_EQ(x.at(s.rows - 1, s.cols - 1), T(7));
  }
}

TYPED_TEST(KernelsGpuNumeric, CopyAgrees) {
  using T = TypeParam;
  std::vector<std::pair<Shape, Shape>> shapes;
  for (const Shape& s : elementwise_shapes) shapes.emplace_back(s, s);
  shapes.emplace_back(Shape{40, 50}, Shape{40, 50, true});  // contiguous into a tile
  for (const auto& [xs, ys] : shapes) {
    SCOPED_TRACE(describe(xs) + " -> " + describe(ys));
    Twin<T> x(xs), y(ys);
    x.randomize(21, 0, 100);
    y.randomize(22, 0, 100);
    x.upload();
    y.upload();
    this->run("copy", Call().buffer(x, in).buffer(y, out));
    expect_agree(y, "y", exact());
    expect_agree(x, "x", exact());
  }
}

TYPED_TEST(KernelsGpuFloating, MapAgreesForEveryOp) {
  using T = TypeParam;
  const std::vector<std::string> ops{"copy", "neg", "abs", "sqrt", "exp", "log", "square", "relu", "sigmoid", "scale"};
  for (const std::string& op : ops) {
    for (const Shape& s : {Shape{1, 1000}, Shape{40, 50}, Shape{40, 50, true}}) {
      SCOPED_TRACE(op + " on " + describe(s));
      const bool positive_only = op == "sqrt" || op == "log";
      Twin<T> x(s), y(s);
      x.randomize(23, positive_only ? 0.1 : -3, 3);
      y.randomize(24);
      x.upload();
      y.upload();
      this->run("map", Call().buffer(x, in).buffer(y, out).text(op).real(1.25));
      expect_agree(y, "y", relative(elementwise_tol<T>));
      expect_agree(x, "x", exact());
    }
  }
}

// Both accumulate in double, in different orders: integer sums (small
// values) are exact; float ones differ by at most n·eps(double)·sum|x|.
TYPED_TEST(KernelsGpuNumeric, SumAgrees) {
  using T = TypeParam;
  // 2^20 elements fill every block of the reduction grid; 5000 rows of a tile stride it in y.
  const std::vector<Shape> shapes{{1, 1000}, {40, 50}, {40, 50, true}, {1, std::size_t{1} << 20}, {5000, 3, true}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(describe(s));
    Twin<T> x(s);
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      x.randomize(25, 0, 255);
    } else {
      x.randomize(25, -1000, 1000);
    }
    x.upload();
    const Results r = this->run("sum", Call().buffer(x, in));
    ASSERT_TRUE(r.cpu && r.gpu);
    if constexpr (std::is_integral_v<T>) {
      EXPECT_EQ(*r.gpu, *r.cpu);
    } else {
      double magnitude = 0;
      for (std::size_t i = 0; i < s.rows; ++i)
        for (std::size_t j = 0; j < s.cols; ++j) magnitude += std::abs(double(x.at(i, j)));
      EXPECT_NEAR(*r.gpu, *r.cpu, double(s.rows * s.cols) * eps<double> * magnitude);
    }
  }
}

}  // namespace

#endif
