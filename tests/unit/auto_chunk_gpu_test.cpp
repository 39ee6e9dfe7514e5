// Automatic chunking on a local GPU: a large chunkable task placed there runs
// as pieces, bit-identical to the same task run whole on the GPU. Needs a GPU
// and skips visibly without one (ctest label gpu).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

namespace {

ferry::Runtime::Options options(bool auto_chunk) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "0";
  o.trace = true;
  o.auto_chunk = auto_chunk;
  return o;
}

struct Outcome {
  std::vector<double> y;
  std::size_t pieces = 0;
};

Outcome run(bool auto_chunk, const std::string& kernel, std::size_t rows, std::size_t cols) {
  ferry::Runtime rt(options(auto_chunk));
  auto x = rt.buffer<double>(rows, cols), y = rt.buffer<double>(rows, cols);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (auto& v : x.host()) v = u(rng);
  for (auto& v : y.host()) v = u(rng);
  const auto gpu = ferry::on(ferry::gpu(0));
  ferry::Task t = kernel == "axpy" ? rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 0.75, gpu)
                                   : rt.submit("map", ferry::read(x), ferry::write(y), "sigmoid", gpu);
  t.wait();
  Outcome out;
  auto h = y.host();
  out.y.assign(h.begin(), h.end());
  for (const auto& span : rt.trace()->tasks()) out.pieces += span.name.starts_with(t.name() + "[") ? 1 : 0;
  return out;
}

TEST(AutoChunkGpu, PiecesGiveTheWholeTasksBits) {
  if (ferry::cuda::device_count() == 0) GTEST_SKIP() << ferry::cuda::unavailable_reason();
  for (const char* kernel : {"axpy", "map"}) {
    const ferry::KernelDef* def = ferry::KernelRegistry::global().find(kernel);
    if (def == nullptr || !def->cuda) GTEST_SKIP() << kernel << " has no CUDA variant";
    for (const auto& [rows, cols] : std::vector<std::pair<std::size_t, std::size_t>>{{1, 16'000'037}, {2049, 8191}}) {
      SCOPED_TRACE(std::string(kernel) + " on " + std::to_string(rows) + "x" + std::to_string(cols));
      const Outcome whole = run(false, kernel, rows, cols);
      const Outcome cut = run(true, kernel, rows, cols);
      EXPECT_EQ(whole.pieces, 0u);
      EXPECT_GE(cut.pieces, 4u) << "not split: the GPU link or model said it does not pay";
      ASSERT_EQ(cut.y.size(), whole.y.size());
      for (std::size_t i = 0; i < cut.y.size(); ++i) ASSERT_EQ(cut.y[i], whole.y[i]) << "element " << i;
    }
  }
}

}  // namespace
