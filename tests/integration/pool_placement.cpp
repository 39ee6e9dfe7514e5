// Run by pool_netns_test.sh inside the client namespace of pool_hosts.sh:
// three ferryd, each behind its own link (1 Gbit/s, 200 Mbit/s, 50 Mbit/s).
// Checks that the scheduler weighs every host on its own: a tiled workload of
// sleep_ms tasks (tests/plugins; a lane held without the CPU) spreads over
// all three hosts, and transfer-heavy tasks go to the host on the best link.
// Then data made on one host and read on another moves between the two
// hosts, not through the client. The counts are of where tasks ran and of
// bytes, never of how long anything took. Exit 1 on a failed check, with the
// placement table that explains the choice.
//
//   pool_placement SLEEP_PLUGIN     (FERRY_REMOTES, FERRY_POOL_HOSTS: pool_hosts.sh)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

bool failed = false;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failed = failed || !ok;
}

// "remote:10.78.1.2:41234" -> the host's index in FERRY_POOL_HOSTS, or -1.
int host_of(const std::string& device, const std::vector<std::string>& hosts) {
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (device.starts_with("remote:" + hosts[i] + ":")) return static_cast<int>(i);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::getenv("FERRY_POOL_HOSTS") == nullptr) {
    std::fprintf(stderr, "usage: pool_hosts.sh ... -- pool_placement SLEEP_PLUGIN\n");
    return 2;
  }
  std::vector<std::string> hosts;
  std::istringstream words(std::getenv("FERRY_POOL_HOSTS"));
  for (std::string h; words >> h;) hosts.push_back(h);
  if (hosts.size() != 3) {
    std::fprintf(stderr, "pool_placement: expected three hosts, got %zu\n", hosts.size());
    return 2;
  }
  // What other runs learnt must not decide this one; one task, one edge (3.).
  setenv("FERRY_PERFMODELS", "0", 1);
  setenv("FERRY_AUTO_CHUNK", "0", 1);
  setenv("FERRY_GPUS", "none", 1);  // the hosts place the work; a local GPU would take it
  ferry::Runtime rt;
  rt.load_plugin(argv[1]);

  // 1. A tiled workload: 36 independent tiles of 30 ms each, for any host.
  // Each host has two lanes; the scheduler sees each host's backlog, so
  // the tiles spread instead of queueing on the first one.
  constexpr int tiles = 36;
  std::vector<ferry::Buffer<float>> tile;
  std::vector<ferry::Task> tasks;
  for (int i = 0; i < tiles; ++i) tile.push_back(rt.buffer<float>(1, 1));
  // Calibration first, one tile at a time: until sleep_ms has been measured
  // its estimate is a guess (it has no cost hint), and a burst placed on a
  // guess says nothing about how hosts are weighed.
  for (int i = 0; i < 6; ++i)
    rt.submit("sleep_ms", ferry::readwrite(tile[i]), 30.0, ferry::on(ferry::remote())).wait();
  for (int i = 0; i < tiles; ++i)
    tasks.push_back(rt.submit("sleep_ms", ferry::readwrite(tile[i]), 30.0, ferry::on(ferry::remote())));
  std::vector<int> ran(hosts.size(), 0);
  std::vector<std::string> address(hosts.size());  // "ip:port", as the runtime names the host
  for (auto& t : tasks) {
    t.wait();
    if (int h = host_of(t.device(), hosts); h >= 0) {
      ++ran[h];
      address[h] = t.device().substr(std::string("remote:").size());
    }
  }
  std::printf("tiles per host (1gbit, 200mbit, 50mbit): %d %d %d\n", ran[0], ran[1], ran[2]);
  for (std::size_t h = 0; h < hosts.size(); ++h)
    check(ran[h] >= tiles / 3 / 2, "host " + hosts[h] + " ran at least half its third of the tiles");
  if (failed) std::printf("the last tile's placement:\n%s\n", tasks.back().explain().c_str());

  // 2. Transfer-heavy tasks: 2 MiB in and out for 1 ms of work, one at a
  // time, each on a fresh buffer that only the client holds. The first few
  // calibrate the model (exploration); then the link decides.
  constexpr int heavy = 10, judged = 6;
  std::vector<int> heavy_ran(hosts.size(), 0);
  std::string table;
  for (int i = 0; i < heavy; ++i) {
    auto x = rt.buffer<float>(512 * 1024);
    auto t = rt.submit("sleep_ms", ferry::readwrite(x), 1.0, ferry::on(ferry::remote()));
    t.wait();
    if (i >= heavy - judged)
      if (int h = host_of(t.device(), hosts); h >= 0) ++heavy_ran[h];
    table = t.explain();
  }
  std::printf("the last %d transfer-heavy tasks per host (1gbit, 200mbit, 50mbit): %d %d %d\n", judged, heavy_ran[0],
              heavy_ran[1], heavy_ran[2]);
  std::printf("the last one's placement:\n%s\n", table.c_str());
  check(heavy_ran[0] >= judged - 1, "transfer-heavy tasks went to the host on the best link");

  // 3. Host to host: data made on host 0 and read on host 1 moves between
  // them (routed by the client's namespace, as by any router between two
  // hosts), sealed, with the client's capability, and not through the
  // client process.
  if (address[0].empty() || address[1].empty()) {
    check(false, "hosts 0 and 1 are known by address (they ran tiles)");
    return 1;
  }
  ferry::Runtime direct;  // a runtime of its own: one edge, A to B, whatever the tiles left where
  constexpr std::size_t n = std::size_t{1} << 17;  // 1 MiB of doubles
  auto made = direct.buffer<double>(n);
  direct.submit("fill", ferry::write(made), 3.0, ferry::on(ferry::remote(address[0]))).wait();
  const auto a_before = direct.remote_stats(address[0]), b_before = direct.remote_stats(address[1]);
  const double sum = direct.submit("sum", ferry::read(made), ferry::on(ferry::remote(address[1]))).result();
  const auto a_after = direct.remote_stats(address[0]), b_after = direct.remote_stats(address[1]);
  std::printf("host to host: %zu bytes from host 0 to host 1; through the client: %zu fetched, %zu shipped\n",
              static_cast<std::size_t>(b_after.bytes_from_hosts - b_before.bytes_from_hosts),
              static_cast<std::size_t>(a_after.bytes_fetched - a_before.bytes_fetched),
              static_cast<std::size_t>(b_after.bytes_shipped - b_before.bytes_shipped));
  check(sum == 3.0 * static_cast<double>(n), "host 1 read what host 0 made");
  check(b_after.bytes_from_hosts - b_before.bytes_from_hosts == n * sizeof(double),
        "host 1 fetched the data from host 0 itself");
  check(a_after.bytes_fetched == a_before.bytes_fetched && b_after.bytes_shipped == b_before.bytes_shipped,
        "no byte of that edge went through the client");
  return failed ? 1 : 0;
}
