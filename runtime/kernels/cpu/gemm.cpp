// gemm on CPU: C = alpha * op(A) * op(B) + beta * C, row-major, through CBLAS.
#include <cblas.h>

#include "cpu/support.hpp"

namespace ferry::kernels {
namespace {

constexpr std::size_t a_index = gemm_param::a, b_index = gemm_param::b, c_index = gemm_param::c,
                      trans_a_index = gemm_param::trans_a, trans_b_index = gemm_param::trans_b;

// op(X) as the product sees it: rows x cols after the optional transpose.
struct Operand {
  std::string name;
  std::size_t rows;
  std::size_t cols;
};

Operand operand(const BufferArg& x, const char* name, bool transposed) {
  if (transposed) return {std::string(name) + "^T", x.cols, x.rows};
  return {name, x.rows, x.cols};
}

bool transposed(const KernelArgs& args, std::size_t index, const char* name) {
  const std::int64_t flag = args.integer(index);
  if (flag != 0 && flag != 1) throw UsageError(fmt::format("{} is {}; it must be 0 or 1", name, flag));
  return flag == 1;
}

void validate(const KernelArgs& args) {
  require_one_dtype(args, {"a", "b", "c"});
  const Operand a = operand(args.buffer(a_index), "a", transposed(args, trans_a_index, "trans_a"));
  const Operand b = operand(args.buffer(b_index), "b", transposed(args, trans_b_index, "trans_b"));
  const BufferArg& c = args.buffer(c_index);
  if (a.cols != b.rows) {
    throw UsageError(fmt::format("{} is {} x {} but {} is {} x {}: inner dimensions {} and {} differ", a.name, a.rows,
                                 a.cols, b.name, b.rows, b.cols, a.cols, b.rows));
  }
  if (c.rows != a.rows || c.cols != b.cols) {
    throw UsageError(fmt::format("c is {} but {} * {} is {} x {}", shape(c), a.name, b.name, a.rows, b.cols));
  }
}

Cost cost(const KernelArgs& args) {
  const BufferArg& c = args.buffer(c_index);
  const BufferArg& a = args.buffer(a_index);
  const std::size_t k = args.integer(trans_a_index) == 1 ? a.rows : a.cols;
  return Cost{2.0 * static_cast<double>(c.rows) * static_cast<double>(c.cols) * static_cast<double>(k),
              total_bytes(args, 3)};
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void run_cpu(ExecContext& ctx) {
  const GemmCall g = gemm_call(ctx.args);
  if (g.c.elements() == 0) return;
  dispatch_floating(g.c.dtype, "gemm", [&]<typename T>(std::type_identity<T>) {
    gemm(g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, blas_int(g.c.rows),
         blas_int(g.c.cols), blas_int(g.k), static_cast<T>(g.alpha), g.a.as<T>(), leading_dim(g.a), g.b.as<T>(),
         leading_dim(g.b), static_cast<T>(g.beta), g.c.as<T>(), leading_dim(g.c));
  });
}

KernelDef make_gemm() {
  KernelDef k;
  k.name = "gemm";
  k.summary = "c = alpha * op(a) * op(b) + beta * c, op transposing where trans_a / trans_b is 1";
  k.params = {buffer_param("a", AccessMode::read, floating),
              buffer_param("b", AccessMode::read, floating),
              buffer_param("c", AccessMode::readwrite, floating),
              real_param("alpha", 1.0),
              real_param("beta", 0.0),
              integer_param("trans_a", 0),
              integer_param("trans_b", 0)};
  k.validate = validate;
  k.cost = cost;
  k.cpu = run_cpu;
  return k;
}

}  // namespace

void register_gemm_kernels(KernelRegistry& registry) { registry.add(make_gemm()); }

}  // namespace ferry::kernels
