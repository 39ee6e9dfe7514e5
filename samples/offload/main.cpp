// The offload demo: a runtime with a GPU host (FERRY_REMOTES, here a local
// ferryd) places each task where it should finish first, and shows why.
//   1. a gemm size sweep: where each size goes, with the scheduler's reasons;
//   2. a chunked streaming transform: chunks go out, are transformed remotely
//      and come back while the next ones travel;
//   3. a tiled Cholesky spread over the CPU and the remote.
// Run by samples/demo.sh; FERRY_TRACE=file writes the trace.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "../cholesky/tiled_cholesky.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string last_line(const std::string& text) {
  const auto end = text.find_last_not_of('\n');
  const auto begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

std::string remote_address() {
  const char* env = std::getenv("FERRY_REMOTES");
  std::string first = env ? env : "";
  first = first.substr(0, first.find(','));
  return first.starts_with("ucx://") ? first.substr(6) : first;
}

void gemm_sweep(ferry::Runtime& rt) {
  std::printf("\n-- 1. gemm size sweep: the scheduler places each size (a few runs per size calibrate it)\n");
  std::printf("%6s  %-28s %s\n", "n", "placed on (last run)", "why");
  for (std::size_t n : {32, 64, 128, 256, 512, 768}) {
    auto a = rt.buffer<double>(n, n), b = rt.buffer<double>(n, n), c = rt.buffer<double>(n, n);
    std::ranges::fill(a.host(), 1.0);
    std::ranges::fill(b.host(), 2.0);
    std::map<std::string, int> where;
    ferry::Task last;
    for (int run = 0; run < 8; ++run) {
      last = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c));
      last.wait();
      ++where[last.device()];
    }
    std::string runs;
    for (const auto& [device, count] : where) runs += device + " x" + std::to_string(count) + " ";
    std::printf("%6zu  %-28s %s   [runs: %s]\n", n, last.device().c_str(), last_line(last.explain()).c_str(),
                runs.c_str());
    if (c.host()(0, 0) != 2.0 * static_cast<double>(n)) std::printf("   WRONG RESULT for n=%zu\n", n);
  }
  // One full explanation, for the largest size.
  auto a = rt.buffer<double>(768, 768), b = rt.buffer<double>(768, 768), c = rt.buffer<double>(768, 768);
  std::printf("\nwhy the last gemm (n=768) went where it did:\n%s\n",
              rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c)).explain().c_str());
  rt.wait();
}

bool streaming(ferry::Runtime& rt, const std::string& remote) {
  const std::size_t n = std::size_t{16} << 20;  // 64 MiB of float
  const std::size_t chunks = 8;
  std::printf("\n-- 2. chunked streaming transform: %zu MiB in %zu chunks, sqrt on the remote, sums on the CPU\n",
              n * 4 >> 20, chunks);
  auto x = rt.buffer<float>(n), y = rt.buffer<float>(n);
  std::ranges::fill(x.host(), 4.0f);
  const auto start = Clock::now();
  auto xs = x.split(chunks), ys = y.split(chunks);
  std::vector<ferry::Task> sums;
  for (std::size_t i = 0; i < chunks; ++i) {
    rt.submit("map", ferry::read(xs[i]), ferry::write(ys[i]), "sqrt", ferry::on(ferry::remote(remote)));
    sums.push_back(rt.submit("sum", ferry::read(ys[i]), ferry::on(ferry::cpu())));  // brings chunk i home
  }
  double total = 0;
  for (auto& s : sums) total += s.result();
  const double seconds = since(start);
  std::printf("   sum of sqrt = %.0f (expected %.0f) in %.3f s, %.0f MiB/s through the remote\n", total,
              2.0 * static_cast<double>(n), seconds, static_cast<double>(n * 4 >> 20) / seconds);
  return total == 2.0 * static_cast<double>(n);
}

bool cholesky(ferry::Runtime& rt) {
  const std::size_t n = 1024, nb = 256;
  std::printf("\n-- 3. tiled Cholesky N=%zu, %zux%zu tiles, placed by the scheduler\n", n, nb, nb);
  auto a = rt.buffer<double>(n, n);
  const std::vector<double> original = ferry::samples::fill_spd(a, 3);
  const auto before = rt.devices();
  const auto start = Clock::now();
  ferry::samples::submit_tiled_cholesky(rt, a.tiles(nb, nb));
  rt.wait();
  const double seconds = since(start);
  auto h = a.host();  // brings remote tiles home
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double llt = 0;
      for (std::size_t k = 0; k <= std::min(i, j); ++k) llt += h(i, k) * h(j, k);
      diff += (llt - original[i * n + j]) * (llt - original[i * n + j]);
      norm += original[i * n + j] * original[i * n + j];
    }
  const double residual = std::sqrt(diff / norm);
  std::printf("   %.3f s, residual %.2e; tasks per device:", seconds, residual);
  const auto after = rt.devices();
  for (std::size_t d = 0; d < after.size(); ++d)
    std::printf("  %s %zu", after[d].name.c_str(), after[d].tasks_run - before[d].tasks_run);
  std::printf("\n");
  return residual < 1e-12;
}

}  // namespace

int main() {
  ferry::Runtime rt;  // FERRY_REMOTES, FERRY_TOKEN_FILE, FERRY_TRACE come from the environment
  const std::string remote = remote_address();
  if (remote.empty()) {
    std::fprintf(stderr, "set FERRY_REMOTES (samples/demo.sh starts a local ferryd for you)\n");
    return 2;
  }
  std::printf("%s\n", rt.describe().c_str());
  gemm_sweep(rt);
  const bool streamed = streaming(rt, remote);
  const bool factored = cholesky(rt);

  const auto stats = rt.remote_stats(remote);
  std::printf("\n-- bytes moved: %.1f MiB to the remote, %.1f MiB back; ferryd ran %llu tasks for us\n",
              static_cast<double>(stats.bytes_shipped) / (1 << 20), static_cast<double>(stats.bytes_fetched) / (1 << 20),
              static_cast<unsigned long long>(stats.server_tasks));
  return streamed && factored ? 0 : 1;
}
