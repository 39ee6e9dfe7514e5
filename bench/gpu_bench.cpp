// The GPU numbers of the CUDA issue, each against its peer in the
// same run (ratios printed), on GPU 0:
//   gemm      Ferry's gemm task on resident data vs bare cublasSgemm (≥ 97 % for n ≥ 4096)
//   peer      a buffer written on GPU 0 read on GPU 1: Ferry's copy vs cudaMemcpyPeer (two GPUs only)
//   chain     1,000 dependent small tasks on one GPU vs the same cuBLAS calls on one stream (≤ 10 µs per task)
//   h2d       Ferry's chunked host-to-device copy vs one cudaMemcpy from pinned memory (≥ 95 %)
//   remote    gemm n=8192 through a ferryd on this machine (loopback) vs local (≤ 3 % slower)
//   sweep     placement of a gemm size sweep after calibration vs the best fixed placement (within 5 %)
//   cholesky  tiled Cholesky (fp64) through Ferry vs cusolverDnDpotrf on one GPU
// Without a GPU it says why and exits 0 (nothing to measure), or 3 with
// --require-gpu, which a GPU check passes so that "no GPU" cannot read as a pass.
//   ferry_bench_gpu [--only=gemm,chain,peer,h2d,remote,sweep,cholesky] [--remote=HOST:PORT --token-file=F] [--reps=5]
//                   [--require-gpu]
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <ferry/cuda_probe.hpp>
#include <ferry/ferry.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "args.hpp"
#include "machine.hpp"
#include "tiled_cholesky.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(s)));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(s)));
}
void check(cusolverStatus_t s, const char* what) {
  if (s != CUSOLVER_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{}: cuSOLVER status {}", what, static_cast<int>(s)));
}

struct Config {
  std::set<std::string> only;
  std::string remote;
  std::string token_file;
  int reps = 5;
  bool require_gpu = false;
  bool wants(const std::string& what) const { return only.empty() || only.contains(what); }
};

ferry::Runtime::Options options(std::vector<std::string> remotes = {}, std::string token_file = {}, bool trace = false) {
  ferry::Runtime::Options o;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.remotes = std::move(remotes);
  o.token_file = std::move(token_file);
  o.trace = trace;
  return o;
}

template <typename T>
void fill_random(const ferry::Buffer<T>& b, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<T> u(-1, 1);
  for (T& v : b.host()) v = u(rng);
}

const char* verdict(bool pass) { return pass ? "PASS" : "MISS"; }

// ---- gemm: Ferry vs bare cuBLAS ----

// Seconds per gemm: the best of `rounds` timings of `reps` back-to-back calls
// (one timing moved with the GPU's clock by several percent between runs).
double cublas_gemm_seconds(std::size_t n, int reps, int rounds = 1) {
  float *a = nullptr, *b = nullptr, *c = nullptr;
  const std::size_t bytes = n * n * sizeof(float);
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMalloc(&c, bytes), "cudaMalloc");
  // The same kind of data Ferry's run multiplies: a GPU multiplying zeros
  // draws less power and clocks higher, which would flatter the peer.
  std::vector<float> host(n * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : host) v = u(rng);
  check(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  for (float& v : host) v = u(rng);
  check(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemset(c, 0, bytes), "cudaMemset");
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  const float one = 1, zero = 0;
  const int ni = static_cast<int>(n);
  auto run = [&] { check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, a, ni, b, ni, &zero, c, ni), "cublasSgemm"); };
  run();
  check(cudaDeviceSynchronize(), "sync");
  double s = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) run();
    check(cudaDeviceSynchronize(), "sync");
    s = std::min(s, since(start) / reps);
  }
  cublasDestroy(h);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return s;
}

double ferry_gemm_seconds(ferry::Runtime& rt, const ferry::Place& place, std::size_t n, int reps, int rounds = 1) {
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);
  fill_random(a, 1), fill_random(b, 2);
  for (int i = 0; i < 2; ++i) rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), ferry::on(place));
  rt.wait();  // warm: the inputs live there now, c is modified there
  double s = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i)
      rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), ferry::on(place));
    rt.wait();
    s = std::min(s, since(start) / reps);
  }
  return s;
}

std::size_t stream_ordered(const ferry::Runtime& rt) {
  std::size_t ordered = 0;
  for (const auto& d : rt.devices()) ordered += d.stream_ordered;
  return ordered;
}

void bench_gemm(const Config& cfg) {
  constexpr int rounds = 3;
  fmt::print("\n== gemm (f32, data resident on the GPU), best of {} timings of {} runs each\n", rounds, cfg.reps);
  fmt::print("{:>6} {:>14} {:>14} {:>8}\n", "n", "cuBLAS GF/s", "Ferry GF/s", "ratio");
  ferry::Runtime rt(options());
  for (std::size_t n : {2048u, 4096u, 8192u}) {
    const double flops = 2.0 * n * n * n;
    const double peer_s = cublas_gemm_seconds(n, cfg.reps, rounds);
    const std::size_t ordered_before = stream_ordered(rt);
    const double ours_s = ferry_gemm_seconds(rt, ferry::gpu(0), n, cfg.reps, rounds);
    const double peer = flops / peer_s * 1e-9, ours = flops / ours_s * 1e-9;
    fmt::print("{:>6} {:>14.0f} {:>14.0f} {:>7.1f}%{}  ({:+.0f} µs per gemm; {} of its {} gemms ordered on the stream)\n", n,
               peer, ours, 100 * ours / peer,
               n >= 4096 ? fmt::format("  target ≥ 97 %: {}", verdict(ours >= 0.97 * peer)) : "",
               (ours_s - peer_s) * 1e6, stream_ordered(rt) - ordered_before, cfg.reps * rounds + 2);
  }
}

// ---- chain: dependent small tasks on one GPU ----

// One stream, no host round trip between calls: what a chain can cost at best.
double cublas_chain_seconds(std::size_t n, int length) {
  double* x = nullptr;
  check(cudaMalloc(&x, n * sizeof(double)), "cudaMalloc");
  check(cudaMemset(x, 0, n * sizeof(double)), "cudaMemset");
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  const double alpha = 1.0;
  const int ni = static_cast<int>(n);
  check(cublasDscal(h, ni, &alpha, x, 1), "cublasDscal");
  check(cudaDeviceSynchronize(), "sync");
  const auto start = Clock::now();
  for (int i = 0; i < length; ++i) check(cublasDscal(h, ni, &alpha, x, 1), "cublasDscal");
  check(cudaDeviceSynchronize(), "sync");
  const double s = since(start);
  cublasDestroy(h);
  cudaFree(x);
  return s;
}

// n doubles on the GPU and a cuBLAS handle on a stream of its own: what a
// bare cublasDscal, Ferry's chain task without Ferry, needs.
struct BareScal {
  double* x = nullptr;
  cublasHandle_t h = nullptr;
  cudaStream_t stream = nullptr;
  explicit BareScal(std::size_t n) {
    check(cudaMalloc(&x, n * sizeof(double)), "cudaMalloc");
    check(cudaMemset(x, 0, n * sizeof(double)), "cudaMemset");
    check(cublasCreate(&h), "cublasCreate");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cublasSetStream(h, stream), "cublasSetStream");
  }
  ~BareScal() {
    cublasDestroy(h);
    cudaStreamDestroy(stream);
    cudaFree(x);
  }
  BareScal(const BareScal&) = delete;
  BareScal& operator=(const BareScal&) = delete;
};

// A bare call and the wait for it, best of 20: with cudaStreamSynchronize
// (the default flags spin, then yield) and with a blocking-sync event.
std::pair<double, double> bare_round_trips(std::size_t n) {
  const BareScal bare(n);
  auto [x, h, stream] = std::tie(bare.x, bare.h, bare.stream);
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const double alpha = 1.0;
  const int ni = static_cast<int>(n);
  double spin = 1e30, blocking = 1e30;
  for (int i = 0; i < 21; ++i) {
    auto start = Clock::now();
    check(cublasDscal(h, ni, &alpha, x, 1), "cublasDscal");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (i > 0) spin = std::min(spin, since(start));
    start = Clock::now();
    check(cublasDscal(h, ni, &alpha, x, 1), "cublasDscal");
    check(cudaEventRecord(event, stream), "cudaEventRecord");
    check(cudaEventSynchronize(event), "cudaEventSynchronize");
    if (i > 0) blocking = std::min(blocking, since(start));
  }
  cudaEventDestroy(event);
  return {spin, blocking};
}

// What each CUDA call on a GPU task's launch and completion path costs the
// host thread that makes it, mean over 1,000 calls each: the parts of a
// chain's per-task time that are CUDA's, not Ferry's.
std::string launch_call_costs(std::size_t n) {
  constexpr int calls = 1000;
  const BareScal bare(n);
  auto [x, h, stream] = std::tie(bare.x, bare.h, bare.stream);
  cudaEvent_t timed = nullptr, untimed = nullptr;
  check(cudaEventCreate(&timed), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&untimed, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const double alpha = 1.0;
  const int ni = static_cast<int>(n);
  const auto per_call = [&](auto&& call) {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    const double s = since(start) / calls;
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return s * 1e6;
  };
  const double scal = per_call([&] { check(cublasDscal(h, ni, &alpha, x, 1), "cublasDscal"); });
  const double record_timed = per_call([&] { check(cudaEventRecord(timed, stream), "cudaEventRecord"); });
  const double record_untimed = per_call([&] { check(cudaEventRecord(untimed, stream), "cudaEventRecord"); });
  const double last_error = per_call([&] { check(cudaGetLastError(), "cudaGetLastError"); });
  const double sync_done = per_call([&] { check(cudaEventSynchronize(untimed), "cudaEventSynchronize"); });
  check(cudaEventRecord(untimed, stream), "cudaEventRecord");
  const double elapsed = per_call([&] {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, timed, timed), "cudaEventElapsedTime");
  });
  int device = 0;
  const double get_device = per_call([&] { check(cudaGetDevice(&device), "cudaGetDevice"); });
  cudaEventDestroy(untimed), cudaEventDestroy(timed);
  return fmt::format("cublasDscal enqueue {:.2f}, cudaEventRecord {:.2f} (timing) / {:.2f} (not), "
                     "cudaGetLastError {:.2f}, cudaEventSynchronize of a done event {:.2f}, "
                     "cudaEventElapsedTime {:.2f}, cudaGetDevice {:.2f}",
                     scal, record_timed, record_untimed, last_error, sync_done, elapsed, get_device);
}

void bench_chain(const Config& cfg) {
  const int length = 1000;
  const std::size_t n = 1024;
  fmt::print("\n== a chain of {} dependent scal tasks (f64, n={}) on GPU 0, best of {}\n", length, n, cfg.reps);
  ferry::Runtime rt(options());
  auto x = rt.buffer<double>(n);
  std::ranges::fill(x.host(), 1.0);
  rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(0)));
  rt.wait();  // x lives on the GPU now
  double ours = 1e30, peer = 1e30;
  const std::size_t ordered_before = stream_ordered(rt);
  double submit = 1e30;
  for (int r = 0; r < cfg.reps; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < length; ++i) rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(0)));
    const double submitted = since(start);
    rt.wait();
    if (since(start) / length < ours) ours = since(start) / length, submit = submitted / length;
    peer = std::min(peer, cublas_chain_seconds(n, length) / length);
  }
  // One task alone, submit to wait, beside a bare call and its wait: what
  // a chain's first launch and last completion add (the wait's wake-up).
  double alone = 1e30;
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(0)));
    rt.wait();
    alone = std::min(alone, since(start));
  }
  const auto [bare_spin, bare_blocking] = bare_round_trips(n);
  const std::size_t ordered = stream_ordered(rt);
  fmt::print("cuBLAS on one stream {:8.2f} µs per call\n", peer * 1e6);
  fmt::print("one task alone       {:8.2f} µs submit to wait; a bare cublasDscal and its wait {:.2f} µs "
             "(stream sync), {:.2f} µs (blocking-sync event, as Ferry's completer waits)\n",
             alone * 1e6, bare_spin * 1e6, bare_blocking * 1e6);
  fmt::print("Ferry's submit alone {:8.2f} µs per task (the rest is the GPU's executor behind it)\n", submit * 1e6);
  fmt::print("CUDA calls, µs each on the calling thread: {}\n", launch_call_costs(n));
  fmt::print("Ferry                {:8.2f} µs per task ({} of {} tasks ordered on the stream)  Ferry/cuBLAS = {:.1f}  "
             "target ≤ 10 µs: {}\n",
             ours * 1e6, ordered - ordered_before, length * cfg.reps, ours / peer, verdict(ours <= 10e-6));
}

// ---- h2d: chunked copy vs one cudaMemcpy ----

double memcpy_gbps(std::size_t bytes, int reps) {
  void *host = nullptr, *dev = nullptr;
  check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  double best = 1e30;
  for (int i = -1; i < reps; ++i) {
    const auto start = Clock::now();
    check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    if (i >= 0) best = std::min(best, since(start));
  }
  cudaFree(dev);
  cudaFreeHost(host);
  return static_cast<double>(bytes) / best * 1e-9;
}

// The same bytes in the two shapes Ferry's pipeline gives them, each still
// cudaMemcpy's own: in pieces of `piece` bytes, each waited for with a
// blocking-sync event before the next is issued (as one piece's ship waits),
// and beside a device-to-host copy of the same size on another stream (a
// chunked readwrite task brings each finished piece home while the next
// goes in). GB/s of the host-to-device bytes, best of `reps`.
struct CopyShapes {
  double pieces = 0;
  double bidirectional = 0;
};

CopyShapes memcpy_shapes(std::size_t bytes, std::size_t piece, int reps) {
  constexpr std::size_t call = std::size_t{4} << 20;  // Ferry's copy calls (Options::chunk_bytes)
  std::byte *host = nullptr, *back = nullptr, *dev = nullptr, *dev2 = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&back), bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dev), bytes), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dev2), bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  std::memset(back, 0, bytes);
  cudaStream_t in = nullptr, out = nullptr;
  check(cudaStreamCreateWithFlags(&in, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamCreateWithFlags(&out, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cudaEvent_t done = nullptr, t0 = nullptr, t1 = nullptr;
  check(cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  double pieces = 1e30, both = 1e30;
  for (int i = -1; i < reps; ++i) {
    const auto start = Clock::now();
    for (std::size_t p = 0; p < bytes; p += piece) {
      const std::size_t end = std::min(bytes, p + piece);
      for (std::size_t c = p; c < end; c += call)
        check(cudaMemcpyAsync(dev + c, host + c, std::min(call, end - c), cudaMemcpyHostToDevice, in), "cudaMemcpyAsync");
      check(cudaEventRecord(done, in), "cudaEventRecord");
      check(cudaEventSynchronize(done), "cudaEventSynchronize");
    }
    if (i >= 0) pieces = std::min(pieces, since(start));
    check(cudaMemcpyAsync(back, dev2, bytes, cudaMemcpyDeviceToHost, out), "cudaMemcpyAsync");
    check(cudaEventRecord(t0, in), "cudaEventRecord");
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, in), "cudaMemcpyAsync");
    check(cudaEventRecord(t1, in), "cudaEventRecord");
    check(cudaStreamSynchronize(in), "cudaStreamSynchronize");
    check(cudaStreamSynchronize(out), "cudaStreamSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    if (i >= 0) both = std::min(both, ms * 1e-3);
  }
  cudaEventDestroy(t1), cudaEventDestroy(t0), cudaEventDestroy(done);
  cudaStreamDestroy(out), cudaStreamDestroy(in);
  cudaFree(dev2), cudaFree(dev), cudaFreeHost(back), cudaFreeHost(host);
  const double b = static_cast<double>(bytes);
  return {b / pieces * 1e-9, b / both * 1e-9};
}

// The host->cuda transfers in the trace that started at `after_us` or later:
// their span (first start to last end, in trace microseconds) and bytes.
struct H2dSpan {
  double first = 1e300, last = 0, bytes = 0;
  double busy = 0;  // microseconds some transfer was under way
  int transfers = 0;
  double gbps() const { return bytes > 0 ? bytes / ((last - first) * 1e-6) * 1e-9 : 0; }
  // Where the time goes: the pieces' own rate, and how much of the span the link was idle.
  std::string parts() const {
    if (transfers == 0 || busy <= 0) return {};
    return fmt::format("{} transfers of {:.1f} MiB, {:.1f} GB/s while moving, link idle {:.0f}% of the span",
                       transfers, bytes / transfers / (1 << 20), bytes / (busy * 1e-6) * 1e-9,
                       100 * (1 - busy / (last - first)));
  }
};

H2dSpan traced_h2d(const ferry::Runtime& rt, double after_us = 0) {
  const auto json = nlohmann::json::parse(rt.trace()->chrome_json());
  H2dSpan span;
  std::vector<std::pair<double, double>> intervals;
  for (const auto& e : json["traceEvents"]) {
    if (e.value("cat", "") != "transfer") continue;
    if (!e["args"].value("link", "").starts_with("host->cuda")) continue;
    const double ts = e["ts"].get<double>();
    if (ts < after_us) continue;
    span.first = std::min(span.first, ts);
    span.last = std::max(span.last, ts + e["dur"].get<double>());
    span.bytes += e["args"]["bytes"].get<double>();
    intervals.emplace_back(ts, ts + e["dur"].get<double>());
    ++span.transfers;
  }
  std::ranges::sort(intervals);
  double covered_to = -1e300;
  for (const auto& [b, e] : intervals) {
    span.busy += std::max(0.0, e - std::max(b, covered_to));
    covered_to = std::max(covered_to, e);
  }
  return span;
}

// One buffer of `elements` to the GPU and back into the trace.
void send_to_gpu(ferry::Runtime& rt, std::size_t elements) {
  auto x = rt.buffer<float>(elements);
  std::ranges::fill(x.host(), 1.0f);
  rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(0)));
  rt.wait();
}

// Ferry's best span over `reps` fresh runtimes, each warmed by one send first:
// the first transfer of a runtime pays for its GPU pool mapping memory and its
// staging buffers, which cudaMemcpy into memory allocated before its timer does not.
H2dSpan ferry_h2d(std::size_t bytes, int reps, bool auto_chunk) {
  H2dSpan best;
  for (int i = 0; i < reps; ++i) {
    auto o = options({}, {}, /*trace=*/true);
    o.auto_chunk = auto_chunk;
    ferry::Runtime rt(o);
    send_to_gpu(rt, bytes / sizeof(float));
    const double warmed = traced_h2d(rt).last;
    send_to_gpu(rt, bytes / sizeof(float));
    const H2dSpan span = traced_h2d(rt, warmed);
    if (span.gbps() > best.gbps()) best = span;
  }
  return best;
}

void bench_h2d(const Config& cfg) {
  fmt::print("\n== host-to-device (pinned host memory), best of {}\n", cfg.reps);
  fmt::print("{:>8} {:>16} {:>16} {:>8}\n", "MiB", "cudaMemcpy GB/s", "Ferry GB/s", "ratio");
  for (std::size_t mib : {64u, 256u, 1024u}) {
    const std::size_t bytes = mib << 20;
    const double peer = memcpy_gbps(bytes, cfg.reps);
    const H2dSpan ours = ferry_h2d(bytes, cfg.reps, /*auto_chunk=*/true);
    if (ours.transfers == 0) {
      fmt::print("{:>8} {:>16.2f} {:>16} (the trace recorded no host->cuda transfer)\n", mib, peer, "-");
      continue;
    }
    fmt::print("{:>8} {:>16.2f} {:>16.2f} {:>7.1f}%  target ≥ 95 %: {}\n", mib, peer, ours.gbps(),
               100 * ours.gbps() / peer, verdict(ours.gbps() >= 0.95 * peer));
    fmt::print("{:>8} ({})\n", "", ours.parts());
    // Where the difference comes from, each row against the same peer.
    const H2dSpan whole = ferry_h2d(bytes, cfg.reps, /*auto_chunk=*/false);
    const auto piece = static_cast<std::size_t>(ours.bytes / ours.transfers);
    const CopyShapes shapes = memcpy_shapes(bytes, piece, cfg.reps);
    fmt::print("{:>8} Ferry unsplit (auto_chunk off) {:.2f} GB/s ({:.1f}%); cudaMemcpy in pieces of {:.1f} MiB, "
               "each waited for: {:.2f} GB/s ({:.1f}%); cudaMemcpy beside a device-to-host copy: {:.2f} GB/s ({:.1f}%)\n",
               "", whole.gbps(), 100 * whole.gbps() / peer, piece / double(1 << 20), shapes.pieces,
               100 * shapes.pieces / peer, shapes.bidirectional, 100 * shapes.bidirectional / peer);
  }
}

// ---- peer: GPU 0 -> GPU 1 ----

void bench_peer(const Config& cfg) {
  const std::size_t bytes = std::size_t{256} << 20;
  fmt::print("\n== a 256 MiB buffer written on GPU 0, read on GPU 1, best of {}\n", cfg.reps);
  if (const int count = ferry::cuda::device_count(); count < 2) {
    fmt::print("skipped: needs 2 GPUs (this machine has {})\n", count);
    return;
  }
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, 1, 0), "cudaDeviceCanAccessPeer");
  // The peer: one cudaMemcpyPeer between plain allocations, peer access on where the pair has it.
  void *src = nullptr, *dst = nullptr;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMalloc(&src, bytes), "cudaMalloc");
  check(cudaSetDevice(1), "cudaSetDevice");
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  if (can) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) check(e, "cudaDeviceEnablePeerAccess");
    cudaGetLastError();
  }
  double peer = 1e30;
  for (int i = -1; i < cfg.reps; ++i) {
    const auto start = Clock::now();
    check(cudaMemcpyPeer(dst, 1, src, 0, bytes), "cudaMemcpyPeer");
    if (i >= 0) peer = std::min(peer, since(start));
  }
  cudaFree(dst);
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaFree(src);
  double ours = 1e30;
  std::size_t from_peers = 0;
  for (int i = 0; i < cfg.reps; ++i) {
    auto o = options({}, {}, /*trace=*/true);
    o.gpus = "0,1";
    o.auto_chunk = false;
    ferry::Runtime rt(o);
    auto x = rt.buffer<float>(bytes / sizeof(float));
    std::ranges::fill(x.host(), 1.0f);
    rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(0)));
    rt.wait();
    rt.submit("scal", ferry::readwrite(x), 1.0, ferry::on(ferry::gpu(1)));
    rt.wait();
    const auto json = nlohmann::json::parse(rt.trace()->chrome_json());
    for (const auto& e : json["traceEvents"])
      if (e.value("cat", "") == "transfer" && e["args"].value("link", "").ends_with("cuda:1"))
        ours = std::min(ours, e["dur"].get<double>() * 1e-6);
    for (const auto& d : rt.devices())
      if (d.name == "cuda:1") from_peers = d.bytes_from_peers;
  }
  fmt::print("cudaMemcpyPeer ({})    {:8.2f} GB/s\n", can ? "peer access" : "no peer access", bytes / peer * 1e-9);
  fmt::print("Ferry GPU 0 -> GPU 1     {:8.2f} GB/s  ({} bytes copied between the GPUs)  Ferry/peer = {:.2f}\n",
             bytes / ours * 1e-9, from_peers, peer / ours);
}

// ---- remote (loopback ferryd) vs local ----

void bench_remote(const Config& cfg) {
  fmt::print("\n== gemm n=8192 (f32) through ferryd on this machine vs local, {} runs\n", cfg.reps);
  if (cfg.remote.empty()) {
    fmt::print("skipped: no --remote (bench/run_gpu_bench.sh starts a ferryd --gpus all and passes it)\n");
    return;
  }
  const std::size_t n = 8192;
  ferry::Runtime local(options());
  const double l = ferry_gemm_seconds(local, ferry::gpu(0), n, cfg.reps);
  ferry::Runtime remote(options({cfg.remote}, cfg.token_file));
  const double r = ferry_gemm_seconds(remote, ferry::remote(), n, cfg.reps);
  fmt::print("local {:.2f} ms, remote {:.2f} ms per gemm: remote is {:+.1f}%  target ≤ 3 % slower: {}\n", l * 1e3,
             r * 1e3, 100 * (r / l - 1), verdict(r <= 1.03 * l));
}

// ---- placement sweep ----

void bench_sweep(const Config& cfg) {
  fmt::print("\n== placement of a gemm size sweep (f32, inputs start on the host; times include transfers)\n");
  const std::vector<std::size_t> sizes = {64, 128, 256, 512, 1024, 2048, 4096};
  ferry::Runtime rt(options());
  auto time_one = [&](std::size_t n, const ferry::Place& place, std::string* device) {
    auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);
    fill_random(a, 3), fill_random(b, 4);
    const auto start = Clock::now();
    ferry::Task t = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), ferry::on(place));
    (void)c.host();  // the result home, as a user would read it
    const double s = since(start);
    if (device != nullptr) *device = t.device();
    return s;
  };
  fmt::print("{:>6} {:>10} {:>10} {:>12} {:>10}  {}\n", "n", "cpu ms", "gpu ms", "scheduler", "its ms", "chose");
  double total_cpu = 0, total_gpu = 0, total_best = 0, total_sched = 0;
  for (std::size_t n : sizes) {
    double cpu_s = 1e30, gpu_s = 1e30;
    for (int i = 0; i < cfg.reps; ++i) cpu_s = std::min(cpu_s, time_one(n, ferry::cpu(), nullptr));
    for (int i = 0; i < cfg.reps; ++i) gpu_s = std::min(gpu_s, time_one(n, ferry::gpu(0), nullptr));
    std::string device;
    double sched = 1e30;
    for (int i = 0; i < cfg.reps; ++i) sched = std::min(sched, time_one(n, ferry::anywhere(), &device));
    total_cpu += cpu_s, total_gpu += gpu_s, total_best += std::min(cpu_s, gpu_s), total_sched += sched;
    fmt::print("{:>6} {:>10.3f} {:>10.3f} {:>12} {:>10.3f}  {}\n", n, cpu_s * 1e3, gpu_s * 1e3, device, sched * 1e3,
               cpu_s < gpu_s ? "(cpu faster)" : "(gpu faster)");
  }
  const double best_fixed = std::min(total_cpu, total_gpu);
  fmt::print("sweep total: all-cpu {:.2f} ms, all-gpu {:.2f} ms, per-size best {:.2f} ms, scheduler {:.2f} ms: "
             "{:.1f}% of the best fixed placement  target within 5 %: {}\n",
             total_cpu * 1e3, total_gpu * 1e3, total_best * 1e3, total_sched * 1e3, 100 * total_sched / best_fixed,
             verdict(total_sched <= 1.05 * best_fixed));
}

// ---- Cholesky vs cuSOLVER ----

void bench_cholesky(const Config& cfg) {
  const std::size_t n = 8192, nb = 1024;
  fmt::print("\n== Cholesky fp64, n={} (Ferry tiles {}), best of {}\n", n, nb, cfg.reps);
  ferry::Runtime rt(options());
  auto a = rt.buffer<double>(n, n);
  const std::vector<double> original = ferry::samples::fill_spd(a, 7);
  const double flops = static_cast<double>(n) * n * n / 3.0;

  double ours = 1e30;
  const auto grid = a.tiles(nb, nb);
  for (int i = 0; i < cfg.reps; ++i) {
    std::ranges::copy(original, a.host().begin());
    const auto start = Clock::now();
    ferry::samples::submit_tiled_cholesky(rt, grid);
    (void)a.host();  // the factor back on the host
    ours = std::min(ours, since(start));
  }
  // Residual on a few entries of L L^T: a full check is n^3 on the host.
  const auto l = a.host();
  double worst = 0;
  for (std::size_t i : {std::size_t{0}, n / 3, n - 1}) {
    for (std::size_t j = 0; j <= i; j += std::max<std::size_t>(1, i / 7)) {
      double s = 0;
      for (std::size_t k = 0; k <= j; ++k) s += l(i, k) * l(j, k);
      worst = std::max(worst, std::abs(s - original[i * n + j]) / std::abs(original[i * n + i]));
    }
  }

  double *dev = nullptr, *work = nullptr;
  int* info = nullptr;
  cusolverDnHandle_t h;
  check(cusolverDnCreate(&h), "cusolverDnCreate");
  check(cudaMalloc(&dev, n * n * sizeof(double)), "cudaMalloc");
  check(cudaMalloc(&info, sizeof(int)), "cudaMalloc");
  int lwork = 0;
  const int ni = static_cast<int>(n);
  check(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_UPPER, ni, dev, ni, &lwork), "potrf_bufferSize");
  check(cudaMalloc(&work, static_cast<std::size_t>(lwork) * sizeof(double)), "cudaMalloc");
  double peer_kernel = 1e30, peer_total = 1e30;
  for (int i = -1; i < cfg.reps; ++i) {
    const auto start = Clock::now();
    check(cudaMemcpy(dev, original.data(), n * n * sizeof(double), cudaMemcpyHostToDevice), "H2D");
    const auto kernel_start = Clock::now();
    check(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_UPPER, ni, dev, ni, work, lwork, info), "cusolverDnDpotrf");
    check(cudaDeviceSynchronize(), "sync");
    const double k = since(kernel_start);
    check(cudaMemcpy(a.host().data(), dev, n * n * sizeof(double), cudaMemcpyDeviceToHost), "D2H");
    if (i >= 0) peer_kernel = std::min(peer_kernel, k), peer_total = std::min(peer_total, since(start));
  }
  cudaFree(work), cudaFree(info), cudaFree(dev);
  cusolverDnDestroy(h);
  fmt::print("Ferry (CPU + GPU, heft, host to host) {:8.0f} GFLOP/s  (sampled residual {:.1e})\n", flops / ours * 1e-9,
             worst);
  fmt::print("cuSOLVER potrf, kernel only            {:8.0f} GFLOP/s  Ferry/cuSOLVER = {:.2f}\n",
             flops / peer_kernel * 1e-9, peer_kernel / ours);
  fmt::print("cuSOLVER potrf, with both copies       {:8.0f} GFLOP/s  Ferry/cuSOLVER = {:.2f}\n",
             flops / peer_total * 1e-9, peer_total / ours);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto v = ferry::bench::option(arg, "--only=")) {
      for (std::size_t b = 0; b <= v->size();) {
        const std::size_t e = std::min(v->find(',', b), v->size());
        cfg.only.insert(v->substr(b, e - b));
        b = e + 1;
      }
    } else if (auto r = ferry::bench::option(arg, "--remote=")) {
      cfg.remote = *r;
    } else if (auto t = ferry::bench::option(arg, "--token-file=")) {
      cfg.token_file = *t;
    } else if (auto n = ferry::bench::option(arg, "--reps=")) {
      cfg.reps = std::max(1, std::atoi(n->c_str()));
    } else if (arg == "--require-gpu") {
      cfg.require_gpu = true;
    } else {
      fmt::print(stderr, "unknown argument {}\n", arg);
      return 2;
    }
  }
  fmt::print("ferry GPU benchmarks on {}\n", ferry::bench::machine());
  if (ferry::cuda::device_count() == 0) {
    fmt::print("no GPU to measure: {}\n", ferry::cuda::unavailable_reason());
    return cfg.require_gpu ? 3 : 0;
  }
  const auto info = ferry::cuda::device_info(0);
  fmt::print("GPU 0: {} ({:.1f} GiB, sm_{}{})\n", info.name, info.total_bytes / double(1 << 30), info.compute_major,
             info.compute_minor);
  try {
    if (cfg.wants("gemm")) bench_gemm(cfg);
    if (cfg.wants("chain")) bench_chain(cfg);
    if (cfg.wants("peer")) bench_peer(cfg);
    if (cfg.wants("h2d")) bench_h2d(cfg);
    if (cfg.wants("remote")) bench_remote(cfg);
    if (cfg.wants("sweep")) bench_sweep(cfg);
    if (cfg.wants("cholesky")) bench_cholesky(cfg);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ferry_bench_gpu: {}\n", e.what());
    return 1;
  }
  return 0;
}
