// Tiled Cholesky, N=4096 fp64 on 2 cores (≥ 1.1× StarPU and
// ≥ LAPACK dpotrf, same cores and BLAS). Every system factors the same SPD
// matrix in the same memory layout (row-major, lower) with the same
// OpenBLAS/LAPACKE calls:
//   Ferry:  samples/cholesky/tiled_cholesky.hpp over tiles() views;
//   StarPU: the same task loop, tiles registered in place (ld = N);
//   LAPACK: one LAPACKE_dpotrf call on the whole matrix, OpenBLAS on 2 threads.
// Tasks call BLAS single-threaded: the workers are the parallelism. Each
// result is checked (||A - L L^T||_F / ||A||_F). Also times potrf on one tile
// through LAPACKE's row-major path against the column-major call Ferry's
// kernel makes, to show what the row-major transposition costs.
//   ferry_bench_cholesky [--n=4096] [--reps=3] [--out=FILE]
#include <cblas.h>
#include <fmt/format.h>
#include <lapacke.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tiled_cholesky.hpp"
#include "machine.hpp"

#if FERRY_BENCH_WITH_STARPU
#include <starpu.h>
#endif

namespace {

constexpr double max_residual = 1e-12;
constexpr int threads = 2;

struct Config {
  std::size_t n = 4096;
  std::vector<std::size_t> tiles = {256, 512};
  int reps = 3;
  std::string out = "bench-cholesky.json";
};

struct Result {
  std::string system;
  std::size_t tile = 0;  // 0: not tiled
  std::vector<double> seconds;
  double residual = 0;   // the worst of the runs
  double best() const { return *std::ranges::min_element(seconds); }
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using Matrix = std::unique_ptr<double[], FreeDeleter>;
Matrix matrix(std::size_t n) {
  auto* p = static_cast<double*>(std::aligned_alloc(64, (n * n * sizeof(double) + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  return Matrix(p);
}

// Random symmetric plus n on the diagonal, as samples/cholesky does.
Matrix spd(std::size_t n) {
  Matrix a = matrix(n);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) a[i * n + j] = a[j * n + i] = u(rng) + (i == j ? static_cast<double>(n) : 0.0);
  return a;
}

// ||A - L L^T||_F / ||A||_F from the lower triangles (the upper of the
// factor holds leftovers). L L^T by dsyrk on both threads.
double residual(const double* a, const double* factor, std::size_t n) {
  static Matrix l, llt;  // 128 MiB each: made once
  if (!l) l = matrix(n), llt = matrix(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) l[i * n + j] = j <= i ? factor[i * n + j] : 0.0;
  openblas_set_num_threads(threads);
  const int ni = static_cast<int>(n);
  cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, ni, ni, 1.0, l.get(), ni, 0.0, llt.get(), ni);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      const double w = i == j ? 1.0 : 2.0;  // each off-diagonal entry stands for two
      const double d = llt[i * n + j] - a[i * n + j];
      diff += w * d * d;
      norm += w * a[i * n + j] * a[i * n + j];
    }
  return std::sqrt(diff / norm);
}

// Runs `factor` (which times itself) reps times after one warm-up, checking each result.
Result measure(const Config& c, const double* a, double* work, std::string system, std::size_t tile,
               const std::function<double()>& factor) {
  Result r{std::move(system), tile, {}, 0};
  for (int rep = -1; rep < c.reps; ++rep) {
    std::copy(a, a + c.n * c.n, work);
    const double s = factor();
    if (rep < 0) continue;  // warm-up: threads, pools, StarPU's history models
    r.seconds.push_back(s);
    r.residual = std::max(r.residual, residual(a, work, c.n));
  }
  return r;
}

Result run_ferry(const Config& c, const double* a, std::size_t nb) {
  ferry::Runtime::Options o;
  o.workers = threads;
  o.persist_perf_models = false;
  o.read_environment = false;
  ferry::Runtime rt(o);
  auto buffer = rt.buffer<double>(c.n, c.n);
  const auto grid = buffer.tiles(nb, nb);
  Result r{"Ferry (2 workers, heft)", nb, {}, 0};
  for (int rep = -1; rep < c.reps; ++rep) {
    std::copy(a, a + c.n * c.n, buffer.host().data());
    openblas_set_num_threads(1);
    const auto start = Clock::now();
    ferry::samples::submit_tiled_cholesky(rt, grid);
    rt.wait();
    const double s = since(start);
    if (rep < 0) continue;
    r.seconds.push_back(s);
    r.residual = std::max(r.residual, residual(a, buffer.host().data(), c.n));
  }
  return r;
}

#if FERRY_BENCH_WITH_STARPU
// The four tile kernels, the calls of runtime/kernels/cpu/{cholesky,gemm}.cpp.
// A StarPU matrix is (nx contiguous elements) x (ny rows) with stride ld: in
// row-major terms nx is the column count.
struct Tile {
  double* p;
  int n, ld;
};
Tile tile(void* buffer) {
  return {reinterpret_cast<double*>(STARPU_MATRIX_GET_PTR(buffer)), static_cast<int>(STARPU_MATRIX_GET_NX(buffer)),
          static_cast<int>(STARPU_MATRIX_GET_LD(buffer))};
}
void potrf_cpu(void* b[], void*) {
  const Tile a = tile(b[0]);
  // Row-major lower is column-major upper: no transposed copy (as in Ferry).
  if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', a.n, a.p, a.ld) != 0) std::abort();
}
void trsm_cpu(void* b[], void*) {
  const Tile l = tile(b[0]), x = tile(b[1]);
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, x.n, x.n, 1.0, l.p, l.ld, x.p, x.ld);
}
void syrk_cpu(void* b[], void*) {
  const Tile a = tile(b[0]), c = tile(b[1]);
  cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, c.n, a.n, -1.0, a.p, a.ld, 1.0, c.p, c.ld);
}
void gemm_cpu(void* b[], void*) {
  const Tile a = tile(b[0]), bt = tile(b[1]), c = tile(b[2]);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c.n, c.n, a.n, -1.0, a.p, a.ld, bt.p, bt.ld, 1.0, c.p, c.ld);
}

// One StarPU session per scheduler: codelets and their history-based models
// (dmda needs them; calibrated during the warm-up run, as StarPU's own
// cholesky example relies on) live from starpu_init to starpu_shutdown.
struct StarpuSession {
  starpu_perfmodel models[4]{};
  starpu_codelet potrf{}, trsm{}, syrk{}, gemm{};

  explicit StarpuSession(const char* sched) {
    starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy_name = sched;
    conf.precedence_over_environment_variables = 1;
    conf.ncpus = threads;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.nmic = 0;
    conf.nmpi_ms = 0;
    if (int rc = starpu_init(&conf); rc != 0) throw std::runtime_error(fmt::format("starpu_init failed ({})", rc));
    // Model symbols name the files in $STARPU_HOME/.starpu/sampling.
    const char* symbols[4] = {"ferry_bench_potrf", "ferry_bench_trsm", "ferry_bench_syrk", "ferry_bench_gemm"};
    starpu_codelet* cls[4] = {&potrf, &trsm, &syrk, &gemm};
    starpu_cpu_func_t funcs[4] = {potrf_cpu, trsm_cpu, syrk_cpu, gemm_cpu};
    const int buffers[4] = {1, 2, 2, 3};  // the last one is written, the others read
    for (int i = 0; i < 4; ++i) {
      models[i].type = STARPU_HISTORY_BASED;
      models[i].symbol = symbols[i];
      starpu_codelet_init(cls[i]);
      cls[i]->where = STARPU_CPU;
      cls[i]->cpu_funcs[0] = funcs[i];
      cls[i]->nbuffers = buffers[i];
      for (int k = 0; k < buffers[i]; ++k) cls[i]->modes[k] = k + 1 < buffers[i] ? STARPU_R : STARPU_RW;
      cls[i]->model = &models[i];
      cls[i]->name = symbols[i];
    }
  }
  ~StarpuSession() { starpu_shutdown(); }
  StarpuSession(const StarpuSession&) = delete;
  StarpuSession& operator=(const StarpuSession&) = delete;

  // The loop of submit_tiled_cholesky; returns the seconds from the first
  // submit to the last task done. Registration is outside the timing, as
  // Ferry's tiles() are.
  double factor(double* a, std::size_t n, std::size_t nb) {
    const std::size_t nt = n / nb;
    std::vector<starpu_data_handle_t> h(nt * nt);
    for (std::size_t i = 0; i < nt; ++i)
      for (std::size_t j = 0; j <= i; ++j)
        starpu_matrix_data_register(&h[i * nt + j], STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(a + i * nb * n + j * nb),
                                    static_cast<uint32_t>(n), static_cast<uint32_t>(nb), static_cast<uint32_t>(nb),
                                    sizeof(double));
    auto at = [&](std::size_t i, std::size_t j) { return h[i * nt + j]; };
    auto insert = [](int rc) {
      if (rc != 0) throw std::runtime_error(fmt::format("starpu_task_insert failed ({})", rc));
    };
    const auto start = Clock::now();
    for (std::size_t k = 0; k < nt; ++k) {
      insert(starpu_task_insert(&potrf, STARPU_RW, at(k, k), 0));
      for (std::size_t i = k + 1; i < nt; ++i) insert(starpu_task_insert(&trsm, STARPU_R, at(k, k), STARPU_RW, at(i, k), 0));
      for (std::size_t i = k + 1; i < nt; ++i) {
        insert(starpu_task_insert(&syrk, STARPU_R, at(i, k), STARPU_RW, at(i, i), 0));
        for (std::size_t j = k + 1; j < i; ++j)
          insert(starpu_task_insert(&gemm, STARPU_R, at(i, k), STARPU_R, at(j, k), STARPU_RW, at(i, j), 0));
      }
    }
    if (int rc = starpu_task_wait_for_all(); rc != 0) throw std::runtime_error("starpu_task_wait_for_all failed");
    const double s = since(start);
    for (std::size_t i = 0; i < nt; ++i)
      for (std::size_t j = 0; j <= i; ++j) starpu_data_unregister(at(i, j));
    return s;
  }
};
#endif

struct PotrfTiming {
  std::size_t nb, ld;
  double row_l_us, col_u_us, col_l_us;  // medians
};

// One tile, single-threaded. LAPACKE_dpotrf(ROW_MAJOR, 'L') transposes into
// a scratch copy and back around LAPACK's column-major 'L'; (COL_MAJOR, 'U')
// factors the same memory in place (Ferry's call). COL_MAJOR 'L' on the same
// memory does the same flops in place and separates the cost of the copies
// from the difference between OpenBLAS's lower and upper potrf.
PotrfTiming time_potrf(const double* a, std::size_t n, std::size_t nb, std::size_t ld) {
  openblas_set_num_threads(1);
  std::vector<double> work(nb * ld);
  auto median_us = [&](int layout, char uplo) {
    std::vector<double> us;
    for (int rep = 0; rep < 21; ++rep) {
      for (std::size_t i = 0; i < nb; ++i) std::copy(a + i * n, a + i * n + nb, work.data() + i * ld);
      const auto start = Clock::now();
      if (LAPACKE_dpotrf(layout, uplo, static_cast<int>(nb), work.data(), static_cast<int>(ld)) != 0)
        throw std::runtime_error("potrf on the leading tile failed");
      us.push_back(since(start) * 1e6);
    }
    std::ranges::sort(us);
    return us[us.size() / 2];
  };
  return {nb, ld, median_us(LAPACK_ROW_MAJOR, 'L'), median_us(LAPACK_COL_MAJOR, 'U'), median_us(LAPACK_COL_MAJOR, 'L')};
}

// The ceiling of any tiled run: the gemm update is most of the flops, so 2
// cores cannot beat twice what one thread's tile gemm reaches (ld = N, as in
// the factorisation). Median of 11, GFLOP/s.
double tile_gemm_gflops(double* m, std::size_t n, std::size_t nb) {
  openblas_set_num_threads(1);
  const int b = static_cast<int>(nb), ld = static_cast<int>(n);
  std::vector<double> gf;
  for (int rep = 0; rep < 11; ++rep) {
    const auto start = Clock::now();
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, b, b, -1.0, m + nb * n, ld, m + 2 * nb * n, ld, 1.0,
                m + 2 * nb * n + nb, ld);
    gf.push_back(2.0 * b * b * b / since(start) * 1e-9);
  }
  std::ranges::sort(gf);
  return gf[gf.size() / 2];
}

std::string openblas_version() {
  std::string v = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  std::erase(v, ' ');
  return v.starts_with("OpenBLAS") ? v.substr(8) : v;
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--n=")) c.n = std::stoul(std::string(a.substr(4)));
    else if (a.starts_with("--reps=")) c.reps = std::max(1, std::stoi(std::string(a.substr(7))));
    else if (a.starts_with("--out=")) c.out = std::string(a.substr(6));
    else throw std::invalid_argument(fmt::format("unknown argument {}", a));
  }
  std::erase_if(c.tiles, [&](std::size_t nb) { return nb > c.n || c.n % nb != 0; });
  if (c.tiles.empty()) throw std::invalid_argument("--n must be a multiple of 256");
  return c;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  ::setenv("STARPU_SILENT", "1", 0);
  ::setenv("STARPU_NCUDA", "0", 0);
  ::setenv("STARPU_NOPENCL", "0", 0);
  const double flop = static_cast<double>(c.n) * static_cast<double>(c.n) * static_cast<double>(c.n) / 3.0;
  const Matrix a = spd(c.n);
  const Matrix work = matrix(c.n);

  std::vector<Result> results;
  for (std::size_t nb : c.tiles) results.push_back(run_ferry(c, a.get(), nb));
#if FERRY_BENCH_WITH_STARPU
  for (const char* sched : {"dmda", "lws"}) {
    StarpuSession session(sched);
    const std::string name = fmt::format("StarPU {}.{} {}", STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, sched);
    for (std::size_t nb : c.tiles)
      results.push_back(measure(c, a.get(), work.get(), name, nb, [&] {
        openblas_set_num_threads(1);
        return session.factor(work.get(), c.n, nb);
      }));
  }
#endif
  results.push_back(measure(c, a.get(), work.get(), "LAPACKE dpotrf, 2 threads", 0, [&] {
    openblas_set_num_threads(threads);
    const auto start = Clock::now();
    // Same factorisation as ROW_MAJOR 'L', minus LAPACKE's transposed copy.
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', static_cast<int>(c.n), work.get(), static_cast<int>(c.n)) != 0)
      throw std::runtime_error("dpotrf failed");
    return since(start);
  }));

  std::vector<double> ceiling;  // per tile size, 2 x one thread's tile gemm
  std::copy(a.get(), a.get() + c.n * c.n, work.get());
  for (std::size_t nb : c.tiles) ceiling.push_back(threads * tile_gemm_gflops(work.get(), c.n, nb));
  std::vector<PotrfTiming> potrf;
  for (std::size_t nb : {std::size_t{256}, std::size_t{512}})
    for (std::size_t ld : {nb, c.n})
      if (nb <= c.n) potrf.push_back(time_potrf(a.get(), c.n, nb, ld));

  auto gflops = [&](const Result& r) { return flop / r.best() * 1e-9; };
  bool all_correct = true;
  fmt::print("\nTiled Cholesky N={} fp64, {} cores, OpenBLAS {}; best of {} (GFLOP/s = N³/3 / s)\n", c.n, threads,
             openblas_version(), c.reps);
  fmt::print("{:<28} {:>5} {:>9} {:>9} {:>10}\n", "system", "tile", "seconds", "GFLOP/s", "residual");
  for (const auto& r : results) {
    const bool ok = r.residual < max_residual;
    all_correct = all_correct && ok;
    fmt::print("{:<28} {:>5} {:>9.3f} {:>9.1f} {:>10.1e}{}\n", r.system, r.tile == 0 ? "-" : std::to_string(r.tile),
               r.best(), gflops(r), r.residual, ok ? "" : "  WRONG");
  }
#if !FERRY_BENCH_WITH_STARPU
  fmt::print("{:<28} StarPU: not installed\n", "StarPU");
#endif
  for (std::size_t t = 0; t < c.tiles.size(); ++t)
    fmt::print("{:<28} {:>5} {:>9} {:>9.1f}   (2 × one thread's dgemm on a tile)\n", "ceiling", c.tiles[t], "",
               ceiling[t]);

  // Verdicts: Ferry's best tile size against the best StarPU configuration and dpotrf.
  auto best_of = [&](std::string_view prefix) -> const Result* {
    const Result* best = nullptr;
    for (const auto& r : results)
      if (r.system.starts_with(prefix) && (best == nullptr || r.best() < best->best())) best = &r;
    return best;
  };
  const Result* ferry = best_of("Ferry");
  const Result* starpu = best_of("StarPU");
  const Result* lapack = best_of("LAPACKE");
  fmt::print("\nratios, Ferry / peer at the same tile size (> 1: Ferry is faster)\n");
  for (const auto& f : results) {
    if (!f.system.starts_with("Ferry")) continue;
    std::string line = fmt::format("  tile {:<4}", f.tile);
    for (const auto& r : results)
      if (!r.system.starts_with("Ferry") && (r.tile == 0 || r.tile == f.tile))
        line += fmt::format("  / {}: {:.2f}", r.system, gflops(f) / gflops(r));
    fmt::print("{}\n", line);
  }
  const bool beat_starpu = starpu != nullptr && gflops(*ferry) >= 1.1 * gflops(*starpu);
  const bool beat_lapack = gflops(*ferry) >= gflops(*lapack);
  if (starpu != nullptr)
    fmt::print("\n≥ 1.1× StarPU:       {}  Ferry {:.1f} GFLOP/s (tile {}) vs StarPU {:.1f} ({} tile {}): {:.2f}×\n",
               beat_starpu ? "PASS" : "MISS", gflops(*ferry), ferry->tile, gflops(*starpu), starpu->system,
               starpu->tile, gflops(*ferry) / gflops(*starpu));
  else
    fmt::print("\n≥ 1.1× StarPU:       not measured (StarPU: not installed)\n");
  fmt::print("≥ LAPACK dpotrf:     {}  Ferry {:.1f} GFLOP/s vs dpotrf {:.1f}: {:.2f}×\n", beat_lapack ? "PASS" : "MISS",
             gflops(*ferry), gflops(*lapack), gflops(*ferry) / gflops(*lapack));

  fmt::print("\npotrf on one tile, 1 thread, median of 21 (µs); Ferry's kernel calls COL_MAJOR 'U'\n");
  fmt::print("{:>5} {:>5} {:>12} {:>12} {:>12} {:>10}\n", "tile", "ld", "ROW_MAJOR L", "COL_MAJOR U", "COL_MAJOR L",
             "rowL/colU");
  for (const auto& p : potrf)
    fmt::print("{:>5} {:>5} {:>12.1f} {:>12.1f} {:>12.1f} {:>10.2f}\n", p.nb, p.ld, p.row_l_us, p.col_u_us, p.col_l_us,
               p.row_l_us / p.col_u_us);

  nlohmann::json report = {{"benchmark", "tiled_cholesky"},   {"git_revision", FERRY_GIT_REVISION},
                           {"machine", ferry::bench::machine()},           {"n", c.n},
                           {"threads", threads},             {"reps", c.reps},
                           {"openblas", openblas_version()},   {"starpu_installed", FERRY_BENCH_WITH_STARPU != 0},
                           {"results", nlohmann::json::array()}, {"potrf_tile", nlohmann::json::array()}};
  for (const auto& r : results)
    report["results"].push_back({{"system", r.system}, {"tile", r.tile}, {"seconds", r.seconds},
                                 {"best_seconds", r.best()}, {"gflops", gflops(r)}, {"residual", r.residual}});
  for (const auto& p : potrf)
    report["potrf_tile"].push_back({{"tile", p.nb}, {"ld", p.ld}, {"row_major_L_us", p.row_l_us},
                                    {"col_major_U_us", p.col_u_us}, {"col_major_L_us", p.col_l_us}});
  for (std::size_t t = 0; t < c.tiles.size(); ++t)
    report["ceiling_gflops"].push_back({{"tile", c.tiles[t]}, {"gflops", ceiling[t]}});
  report["verdicts"] = {{"ge_1_1x_starpu", starpu == nullptr ? nlohmann::json(nullptr) : nlohmann::json(beat_starpu)},
                        {"ge_dpotrf", beat_lapack}};
  std::ofstream(c.out) << report.dump(2) << '\n';
  fmt::print("\nJSON: {}\n", c.out);
  return all_correct ? 0 : 1;
} catch (const std::exception& e) {
  fmt::print(stderr, "ferry_bench_cholesky: {}\n", e.what());
  return 1;
}
