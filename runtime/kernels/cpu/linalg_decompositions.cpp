// The singular value, symmetric eigenvalue and QR decompositions (LAPACK's
// divide-and-conquer gesdd and syevd, Householder geqrf + orgqr) as built-in
// kernels, so a CPU ferryd runs them too. Their CUDA twins are
// cuda/linalg_decompositions.cpp.
//
// Row-major A (m x n) is column-major A^T (n x m). The SVD of A^T is
// V S U^T, so LAPACK's column-major U of A^T lands, byte for byte, where the
// row-major V^T of A belongs, and its V^T where the row-major U belongs: no
// transposed copies (which LAPACKE makes for LAPACK_ROW_MAJOR).
#include "cpu/linalg_decompositions.hpp"

#include <lapacke.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cpu/support.hpp"

namespace ferry::kernels {
namespace {

lapack_int gesdd(char jobz, lapack_int m, lapack_int n, float* a, lapack_int lda, float* s, float* u, lapack_int ldu,
                 float* vt, lapack_int ldvt) {
  return LAPACKE_sgesdd(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt);
}
lapack_int gesdd(char jobz, lapack_int m, lapack_int n, double* a, lapack_int lda, double* s, double* u, lapack_int ldu,
                 double* vt, lapack_int ldvt) {
  return LAPACKE_dgesdd(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt);
}

lapack_int syevd(lapack_int n, float* a, lapack_int lda, float* w) {
  return LAPACKE_ssyevd(LAPACK_COL_MAJOR, 'V', 'U', n, a, lda, w);
}
lapack_int syevd(lapack_int n, double* a, lapack_int lda, double* w) {
  return LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'U', n, a, lda, w);
}

// QR needs A itself column-major (A^T's QR would be A's LQ), so it works on
// a transposed copy: O(mn) next to the factorisation's O(mn^2).
lapack_int geqrf(lapack_int m, lapack_int n, float* a, lapack_int lda, float* tau) {
  return LAPACKE_sgeqrf(LAPACK_COL_MAJOR, m, n, a, lda, tau);
}
lapack_int geqrf(lapack_int m, lapack_int n, double* a, lapack_int lda, double* tau) {
  return LAPACKE_dgeqrf(LAPACK_COL_MAJOR, m, n, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, float* a, lapack_int lda, const float* tau) {
  return LAPACKE_sorgqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, double* a, lapack_int lda, const double* tau) {
  return LAPACKE_dorgqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
}

// a's elements, rows packed (LAPACK overwrites its input; the kernel's a is read-only).
template <typename T>
std::vector<T> packed(const BufferArg& a) {
  std::vector<T> out(a.elements());
  for (std::size_t r = 0; r < a.rows; ++r) std::copy_n(row<T>(a, r), a.cols, out.data() + r * a.cols);
  return out;
}

template <typename T>
void set_identity(const BufferArg& x) {
  for (std::size_t r = 0; r < x.rows; ++r) {
    std::fill_n(row<T>(x, r), x.cols, T{0});
    if (r < x.cols) row<T>(x, r)[r] = T{1};
  }
}

void require_vector(const BufferArg& v, const char* name, std::size_t length) {
  if (v.elements() != length) {
    throw UsageError(fmt::format("{} is {} but must hold {} elements", name, shape(v), length));
  }
}

void require_matrix(const BufferArg& x, const char* name, std::size_t rows, std::size_t cols) {
  if (x.rows != rows || x.cols != cols) {
    throw UsageError(fmt::format("{} is {} but must be {} x {}", name, shape(x), rows, cols));
  }
}

KernelDef make_gesdd() {
  KernelDef k;
  k.name = "gesdd";
  k.summary = "singular value decomposition a = u * diag(s) * vt, s descending (full_matrices=1: u and vt square)";
  k.params = {buffer_param("a", AccessMode::read, floating), buffer_param("s", AccessMode::write, floating),
              buffer_param("u", AccessMode::write, floating), buffer_param("vt", AccessMode::write, floating),
              integer_param("full_matrices", 0)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"a", "s", "u", "vt"});
    const SvdShape d = svd_shape(args);
    require_vector(args.buffer(svd_param::s), "s", d.k);
    require_matrix(args.buffer(svd_param::u), "u", d.m, d.u_cols);
    require_matrix(args.buffer(svd_param::vt), "vt", d.vt_rows, d.n);
  };
  k.cost = [](const KernelArgs& args) {
    const SvdShape d = svd_shape(args);
    const double m = static_cast<double>(d.m), n = static_cast<double>(d.n), r = static_cast<double>(d.k);
    return Cost{4.0 * m * n * r + 8.0 * r * r * r, total_bytes(args, 4)};
  };
  k.cpu = [](ExecContext& ctx) {
    const SvdShape d = svd_shape(ctx.args);
    const BufferArg& a = ctx.args.buffer(svd_param::a);
    const BufferArg& u = ctx.args.buffer(svd_param::u);
    const BufferArg& vt = ctx.args.buffer(svd_param::vt);
    const lapack_int info = dispatch_floating(a.dtype, "gesdd", [&]<typename T>(std::type_identity<T>) -> lapack_int {
      if (d.k == 0) {  // nothing to decompose; the square factors of an empty matrix are identities
        set_identity<T>(u);
        set_identity<T>(vt);
        return 0;
      }
      std::vector<T> work = packed<T>(a);
      return gesdd(d.full ? 'A' : 'S', blas_int(d.n), blas_int(d.m), work.data(), blas_int(d.n),
                   ctx.args.buffer(svd_param::s).template as<T>(), vt.as<T>(), leading_dim(vt), u.as<T>(),
                   leading_dim(u));
    });
    if (info > 0) throw Error("gesdd: the singular value decomposition did not converge (NaN or inf in a?)");
    if (info < 0) throw Error(fmt::format("gesdd: LAPACK rejected argument {}", -info));
  };
  return k;
}

KernelDef make_syevd() {
  KernelDef k;
  k.name = "syevd";
  k.summary =
      "eigenvalues w (ascending) and eigenvectors (the columns of v) of a symmetric a, read from its lower "
      "triangle";
  k.params = {buffer_param("a", AccessMode::read, floating), buffer_param("w", AccessMode::write, floating),
              buffer_param("v", AccessMode::write, floating)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"a", "w", "v"});
    const BufferArg& a = args.buffer(0);
    require_square(a, "a");
    require_vector(args.buffer(1), "w", a.rows);
    require_matrix(args.buffer(2), "v", a.rows, a.rows);
  };
  k.cost = [](const KernelArgs& args) {
    const double n = static_cast<double>(args.buffer(0).rows);
    return Cost{9.0 * n * n * n, total_bytes(args, 3)};
  };
  k.cpu = [](ExecContext& ctx) {
    const BufferArg& a = ctx.args.buffer(0);
    const BufferArg& v = ctx.args.buffer(2);
    const std::size_t n = a.rows;
    if (n == 0) return;
    const lapack_int info = dispatch_floating(a.dtype, "syevd", [&]<typename T>(std::type_identity<T>) {
      for (std::size_t r = 0; r < n; ++r) std::copy_n(row<T>(a, r), n, row<T>(v, r));
      // The row-major lower triangle is the column-major upper one; the
      // column-major eigenvectors come back as the rows of v.
      const lapack_int status = syevd(blas_int(n), v.as<T>(), leading_dim(v), ctx.args.buffer(1).template as<T>());
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t c = r + 1; c < n; ++c) std::swap(row<T>(v, r)[c], row<T>(v, c)[r]);
      }
      return status;
    });
    if (info > 0) throw Error("syevd: the eigenvalue decomposition did not converge (NaN or inf in a?)");
    if (info < 0) throw Error(fmt::format("syevd: LAPACK rejected argument {}", -info));
  };
  return k;
}

KernelDef make_geqrf() {
  KernelDef k;
  k.name = "geqrf";
  k.summary = "QR decomposition a = q * r, q with orthonormal columns, r upper triangular (complete=1: q square)";
  k.params = {buffer_param("a", AccessMode::read, floating), buffer_param("q", AccessMode::write, floating),
              buffer_param("r", AccessMode::write, floating), integer_param("complete", 0)};
  k.validate = [](const KernelArgs& args) {
    require_one_dtype(args, {"a", "q", "r"});
    const QrShape d = qr_shape(args);
    require_matrix(args.buffer(qr_param::q), "q", d.m, d.q_cols);
    require_matrix(args.buffer(qr_param::r), "r", d.r_rows, d.n);
  };
  k.cost = [](const KernelArgs& args) {
    const QrShape d = qr_shape(args);
    const double m = static_cast<double>(d.m), n = static_cast<double>(d.n), r = static_cast<double>(d.k);
    return Cost{4.0 * m * n * r, total_bytes(args, 3)};
  };
  k.cpu = [](ExecContext& ctx) {
    const QrShape d = qr_shape(ctx.args);
    const BufferArg& a = ctx.args.buffer(qr_param::a);
    const BufferArg& q = ctx.args.buffer(qr_param::q);
    const BufferArg& r = ctx.args.buffer(qr_param::r);
    const lapack_int info = dispatch_floating(a.dtype, "geqrf", [&]<typename T>(std::type_identity<T>) {
      for (std::size_t i = 0; i < d.r_rows; ++i) std::fill_n(row<T>(r, i), d.n, T{0});
      if (d.k == 0) {  // nothing to factor; a complete q is the identity
        set_identity<T>(q);
        return lapack_int{0};
      }
      const std::size_t m = d.m;
      std::vector<T> w(m * std::max(d.n, d.q_cols));  // column-major, ld m
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < d.n; ++j) w[j * m + i] = row<T>(a, i)[j];
      }
      std::vector<T> tau(d.k);
      const lapack_int ld = blas_int(m);
      lapack_int status = geqrf(ld, blas_int(d.n), w.data(), ld, tau.data());
      if (status != 0) return status;
      for (std::size_t i = 0; i < d.r_rows; ++i) {
        for (std::size_t j = i; j < d.n; ++j) row<T>(r, i)[j] = w[j * m + i];
      }
      status = orgqr(ld, blas_int(d.q_cols), blas_int(d.k), w.data(), ld, tau.data());
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < d.q_cols; ++j) row<T>(q, i)[j] = w[j * m + i];
      }
      return status;
    });
    if (info < 0) throw Error(fmt::format("geqrf: LAPACK rejected argument {}", -info));
  };
  return k;
}

}  // namespace

QrShape qr_shape(const KernelArgs& args) {
  const BufferArg& a = args.buffer(qr_param::a);
  QrShape d;
  d.m = a.rows;
  d.n = a.cols;
  d.k = std::min(d.m, d.n);
  const bool complete = args.integer(qr_param::complete) == 1;
  d.q_cols = complete ? d.m : d.k;
  d.r_rows = complete ? d.m : d.k;
  return d;
}

SvdShape svd_shape(const KernelArgs& args) {
  const BufferArg& a = args.buffer(svd_param::a);
  SvdShape d;
  d.m = a.rows;
  d.n = a.cols;
  d.k = std::min(d.m, d.n);
  d.full = args.integer(svd_param::full_matrices) == 1;
  d.u_cols = d.full ? d.m : d.k;
  d.vt_rows = d.full ? d.n : d.k;
  return d;
}

void register_linalg_decomposition_kernels(KernelRegistry& registry) {
  registry.add(make_gesdd());
  registry.add(make_syevd());
  registry.add(make_geqrf());
}

}  // namespace ferry::kernels
