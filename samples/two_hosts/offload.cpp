// Offload from a CPU machine to a ferryd host: axpy, gemm and dot, once pinned
// to the remote and once to the local CPU, each checked against a plain loop.
// The runtime reads FERRY_REMOTES and FERRY_TOKEN_FILE itself; two_hosts.sh
// sets them. Exits 1 on a wrong result, or when a remote was given but the
// pinned tasks did not run there (a silent fallback would hide a broken link).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

constexpr std::size_t n = std::size_t{1} << 22;  // axpy/dot: 16 MiB per float vector, several chunks
constexpr std::size_t m = 256;                   // gemm: m x m

float value(std::size_t i, std::size_t salt) { return static_cast<float>(std::sin(0.001 * double(i) + double(salt))); }

bool close(double got, double want, double tol) { return std::abs(got - want) <= tol * (1.0 + std::abs(want)); }

// What a plain loop computes, for comparison.
struct Reference {
  std::vector<float> y;  // y + 2 x
  std::vector<double> c; // a b
  double dot = 0;        // x . (y + 2 x)
};

Reference reference() {
  Reference r;
  r.y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    r.y[i] = value(i, 1) + 2.0f * value(i, 0);
    r.dot += double(value(i, 0)) * double(r.y[i]);
  }
  r.c.assign(m * m, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t k = 0; k < m; ++k)
      for (std::size_t j = 0; j < m; ++j) r.c[i * m + j] += double(value(i * m + k, 2)) * double(value(k * m + j, 3));
  return r;
}

// Runs the three kernels pinned to `place`; returns false on a wrong result.
bool run(ferry::Runtime& rt, const ferry::Place& place, const Reference& ref, const std::string& remote) {
  auto x = rt.buffer<float>(n), y = rt.buffer<float>(n);
  auto a = rt.buffer<float>(m, m), b = rt.buffer<float>(m, m), c = rt.buffer<float>(m, m);
  {
    auto hx = x.host(), hy = y.host(), ha = a.host(), hb = b.host();
    for (std::size_t i = 0; i < n; ++i) hx[i] = value(i, 0), hy[i] = value(i, 1);
    for (std::size_t i = 0; i < m * m; ++i) ha[i] = value(i, 2), hb[i] = value(i, 3);
  }
  const auto start = std::chrono::steady_clock::now();
  auto t_axpy = rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.0, ferry::on(place));
  auto t_gemm = rt.submit("gemm", ferry::read(a), ferry::read(b), ferry::readwrite(c), ferry::on(place));
  auto t_dot = rt.submit("dot", ferry::read(x), ferry::read(y), ferry::on(place));
  const double dot = t_dot.result();
  // host() brings y and c home: until now they stayed where they were written.
  auto hy = y.host();
  auto hc = c.host();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  bool ok = close(dot, ref.dot, 1e-4);
  std::size_t bad_y = 0, bad_c = 0;
  for (std::size_t i = 0; i < n; ++i) bad_y += !close(hy[i], ref.y[i], 1e-5);
  for (std::size_t i = 0; i < m * m; ++i) bad_c += !close(hc[i], ref.c[i], 1e-4);
  ok = ok && bad_y == 0 && bad_c == 0;

  std::printf("[%s] %.1f ms incl. results home: axpy on %s, gemm on %s, dot on %s\n", place.describe().c_str(), ms,
              t_axpy.device().c_str(), t_gemm.device().c_str(), t_dot.device().c_str());
  std::printf("  dot = %.6g (reference %.6g); wrong elements: y %zu/%zu, c %zu/%zu -> %s\n", dot, ref.dot, bad_y, n,
              bad_c, m * m, ok ? "ok" : "WRONG");
  if (place.kind == ferry::Place::Kind::remote) {
    for (const auto* t : {&t_axpy, &t_gemm, &t_dot})
      if (!t->device().starts_with("remote:")) {
        std::printf("  a task pinned to the remote ran on %s: %s\n", t->device().c_str(), t->explain().c_str());
        ok = false;
      }
    const auto s = rt.remote_stats(remote);
    std::printf("  %s: shipped %.1f MiB, fetched %.1f MiB; ferryd counted %.1f MiB in, %.1f MiB out, %llu tasks\n",
                remote.c_str(), double(s.bytes_shipped) / (1 << 20), double(s.bytes_fetched) / (1 << 20),
                double(s.server_bytes_in) / (1 << 20), double(s.server_bytes_out) / (1 << 20),
                static_cast<unsigned long long>(s.server_tasks));
  }
  return ok;
}

}  // namespace

int main() {
  ferry::Runtime rt;  // FERRY_REMOTES, FERRY_TOKEN_FILE, FERRY_CHUNK_* come from the environment
  const auto& remotes = rt.options().remotes;
  std::string remote;
  if (!remotes.empty()) remote = remotes.front().starts_with("ucx://") ? remotes.front().substr(6) : remotes.front();
  std::printf("devices: %s\n", rt.describe().c_str());

  const Reference ref = reference();
  bool ok = true;
  if (remote.empty()) std::printf("FERRY_REMOTES is not set: CPU only (run me through two_hosts.sh to offload)\n");
  else ok = run(rt, ferry::remote(remote), ref, remote) && ok;
  ok = run(rt, ferry::cpu(), ref, remote) && ok;
  rt.wait();
  std::printf("%s\n", ok ? "all results correct" : "FAILED");
  return ok ? 0 : 1;
}
