// The chaos harness's graph: the shapes of work a pool runs, in one DAG —
// a tiled Cholesky spread over the pool, a readwrite chain that is
// forwarded to one host, edges from one host to another (data that only
// host A holds read on host B), and large elementwise tasks that are split
// into pieces (auto-chunking). Built from a placement so that the same
// graph runs once on the CPU alone (the reference) and then, again and
// again, on the pool while hosts fail; every output is compared bit for bit.
#pragma once

#include <cstddef>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "tiled_cholesky.hpp"

namespace ferry::chaos {

// Where each part of the graph goes: `any` lets the scheduler pick a host
// of the pool, `host[i]` names one (an edge needs its two ends on
// different hosts). On the reference runtime every one is the CPU.
struct Placement {
  OnOption any;
  std::vector<OnOption> host;
};

inline Placement on_cpu(std::size_t hosts) {
  return {on(cpu()), std::vector<OnOption>(hosts, on(cpu()))};
}

inline Placement on_pool(const std::vector<std::string>& addresses) {
  Placement p{on(remote()), {}};
  for (const auto& a : addresses) p.host.push_back(on(remote(a)));
  return p;
}

// Every output of one run of the graph, as bytes and task results.
struct Outputs {
  std::vector<std::vector<double>> buffers;
  std::vector<double> results;
  std::size_t tasks = 0;
  // Where each edge's tasks ran, to tell a wrong result's story.
  std::vector<std::string> edge_devices;
  std::vector<std::string> chain_devices;
  // Tasks split into pieces (auto-chunking), by the device of their join:
  // DeviceInfo::tasks_run counts the join there beside the pieces, though
  // only the pieces ran on it (the soak subtracts these).
  std::map<std::string, std::size_t> split_on;
};

// Sizes small enough that a run takes about a second on a loaded
// two-core box, so the bounded CI form fits many faults.
struct Shape {
  std::size_t cholesky_n = 512, cholesky_tile = 128;
  int chain = 400;
  std::size_t edge_doubles = std::size_t{1} << 18;   // 2 MiB per edge
  std::size_t chunked_doubles = std::size_t{1} << 22;  // 32 MiB: split into pieces
  // Which parts run (all by default; fewer to narrow a failure down).
  bool cholesky = true, chained = true, edged = true, chunked = true;
};

template <typename T>
std::vector<T> bytes_of(const Buffer<T>& b) {
  auto h = b.host_read();
  return {h.begin(), h.end()};
}

inline void fill_uniform(Buffer<double>& b, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (auto& v : b.host()) v = u(rng);
}

inline Outputs run_mixed_dag(Runtime& rt, const Placement& where, const Shape& shape = {}) {
  Outputs out;
  std::vector<Task> results;

  // Tiled Cholesky over the pool.
  auto a = rt.buffer<double>(shape.cholesky_n, shape.cholesky_n);
  samples::fill_spd(a, 17);
  const auto tiles = a.tiles(shape.cholesky_tile, shape.cholesky_tile);
  if (shape.cholesky) out.tasks += samples::submit_tiled_cholesky(rt, tiles, where.any);

  // A readwrite chain: its tasks follow one another to one host, forwarded
  // before their predecessors finish.
  auto cx = rt.buffer<double>(3000), cy = rt.buffer<double>(3000);
  fill_uniform(cx, 5, -1, 1);
  fill_uniform(cy, 6, -1, 1);
  std::vector<Task> chain;
  for (int i = 0; shape.chained && i < shape.chain; ++i, ++out.tasks) {
    if (i % 2 == 0) chain.push_back(rt.submit("axpy", read(cx), readwrite(cy), 0.25 + i * 1e-3, where.any));
    else chain.push_back(rt.submit("scal", readwrite(cy), 0.999, where.any));
  }

  // Host-to-host edges: written on host i, copied on host i+1, scaled on
  // host i+2, summed on host i again.
  std::vector<Buffer<double>> edges;
  std::vector<Task> edge_tasks;
  const std::size_t hosts = where.host.size();
  for (std::size_t i = 0; shape.edged && i < hosts; ++i) {
    auto u = rt.buffer<double>(shape.edge_doubles), v = rt.buffer<double>(shape.edge_doubles);
    edge_tasks.push_back(rt.submit("fill", write(u), 1.0 + static_cast<double>(i), where.host[i]));
    edge_tasks.push_back(rt.submit("copy", read(u), write(v), where.host[(i + 1) % hosts]));
    edge_tasks.push_back(rt.submit("scal", readwrite(v), 1.5, where.host[(i + 2) % hosts]));
    results.push_back(rt.submit("sum", read(v), where.host[i]));
    edge_tasks.push_back(results.back());
    out.tasks += 4;
    edges.push_back(std::move(u));
    edges.push_back(std::move(v));
  }

  // Large elementwise tasks, split into pieces on the way out.
  auto p = rt.buffer<double>(shape.chunked_doubles), q = rt.buffer<double>(shape.chunked_doubles);
  auto r = rt.buffer<double>(shape.chunked_doubles);
  fill_uniform(p, 9, -4, 4);
  fill_uniform(r, 10, -1, 1);
  std::vector<Task> chunked;
  if (shape.chunked) {
    chunked.push_back(rt.submit("map", read(p), write(q), "sigmoid", where.any));
    chunked.push_back(rt.submit("axpy", read(q), readwrite(r), 0.5, where.any));
    results.push_back(rt.submit("sum", read(r), where.any));
    chunked.push_back(results.back());
    out.tasks += 3;
  }

  rt.wait();
  for (auto& t : results) out.results.push_back(t.result());
  for (auto& t : edge_tasks) out.edge_devices.push_back(t.name() + "@" + t.device());
  for (auto& t : chunked)
    if (t.explain().find("automatically split") != std::string::npos) ++out.split_on[t.device()];
  // The chain's hosts in runs: "remote:A x37, remote:B x5, ...".
  for (std::size_t i = 0; i < chain.size();) {
    std::size_t j = i;
    while (j < chain.size() && chain[j].device() == chain[i].device()) ++j;
    out.chain_devices.push_back(chain[i].device() + " x" + std::to_string(j - i));
    i = j;
  }
  out.buffers.push_back(bytes_of(a));
  out.buffers.push_back(bytes_of(cy));
  for (const auto& e : edges) out.buffers.push_back(bytes_of(e));
  out.buffers.push_back(bytes_of(q));
  out.buffers.push_back(bytes_of(r));
  return out;
}

}  // namespace ferry::chaos
