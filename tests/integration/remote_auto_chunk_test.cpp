// Automatic chunking against a real ferryd: a large task of a chunkable
// built-in placed on the remote runs as pieces on range views, and its
// results are bit-identical to the same task run whole.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "ferryd_process.hpp"

namespace {

using ferry::test::FerrydProcess;

ferry::Runtime::Options options_for(const FerrydProcess& server, bool auto_chunk) {
  ferry::Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";  // a test that wants a GPU asks for one
  o.trace = true;
  o.auto_chunk = auto_chunk;
  o.remotes = {server.address()};
  o.token_file = server.token_file();
  return o;
}

using Submit = std::function<ferry::Task(ferry::Runtime&, ferry::Buffer<double>&, ferry::Buffer<double>&,
                                         const ferry::OnOption&)>;

struct Case {
  std::string name;
  Submit submit;
};

// Every built-in declaring itself chunkable (kernels_test checks the list).
std::vector<Case> chunkable_cases() {
  using ferry::read, ferry::write, ferry::readwrite;
  return {
      {"fill", [](auto& rt, auto&, auto& y, const auto& at) { return rt.submit("fill", write(y), 2.5, at); }},
      {"copy", [](auto& rt, auto& x, auto& y, const auto& at) { return rt.submit("copy", read(x), write(y), at); }},
      {"map sigmoid",
       [](auto& rt, auto& x, auto& y, const auto& at) { return rt.submit("map", read(x), write(y), "sigmoid", at); }},
      {"map scale",
       [](auto& rt, auto& x, auto& y, const auto& at) { return rt.submit("map", read(x), write(y), "scale", 1.5, at); }},
      {"axpy",
       [](auto& rt, auto& x, auto& y, const auto& at) { return rt.submit("axpy", read(x), readwrite(y), 0.75, at); }},
      {"scal", [](auto& rt, auto&, auto& y, const auto& at) { return rt.submit("scal", readwrite(y), 1.25, at); }},
  };
}

struct Outcome {
  std::vector<double> y;
  std::size_t pieces = 0;  // spans named "<task>[i/n]" in the trace
};

Outcome run_case(ferry::Runtime& rt, const FerrydProcess& server, const Case& c, std::size_t rows, std::size_t cols) {
  auto x = rt.buffer<double>(rows, cols), y = rt.buffer<double>(rows, cols);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (auto& v : x.host()) v = u(rng);
  for (auto& v : y.host()) v = u(rng);
  const std::size_t spans_before = rt.trace()->tasks().size();
  ferry::Task task = c.submit(rt, x, y, ferry::on(ferry::remote(server.address())));
  task.wait();
  EXPECT_TRUE(task.done());
  Outcome out;
  auto h = y.host();
  out.y.assign(h.begin(), h.end());
  const auto spans = rt.trace()->tasks();
  for (std::size_t i = spans_before; i < spans.size(); ++i)
    if (spans[i].name.starts_with(task.name() + "[")) ++out.pieces;
  return out;
}

TEST(RemoteAutoChunk, PiecesGiveTheWholeTasksBits) {
  FerrydProcess server;
  ferry::Runtime whole(options_for(server, false));
  // Pieces bounded by the 1 MiB floor alone, taken whenever the model says
  // they are faster at all: whether splitting pays on a link measured under
  // load is the planner's question (auto_chunk_test); this test asks
  // whether the pieces give the whole task's bits.
  auto forced = options_for(server, true);
  forced.chunk_policy.latency_multiple = 0;
  forced.chunk_policy.min_gain = 0;
  ferry::Runtime chunked(forced);
  // A vector cut into element ranges and a matrix cut into row ranges, neither
  // dividing evenly into any piece count.
  const std::vector<std::pair<std::size_t, std::size_t>> shapes{{1, 4'000'037}, {517, 8191}};
  for (const auto& [rows, cols] : shapes) {
    for (const Case& c : chunkable_cases()) {
      SCOPED_TRACE(c.name + " on " + std::to_string(rows) + "x" + std::to_string(cols));
      const Outcome expected = run_case(whole, server, c, rows, cols);
      const Outcome got = run_case(chunked, server, c, rows, cols);
      EXPECT_EQ(expected.pieces, 0u) << "split with auto_chunk off";
      EXPECT_GE(got.pieces, 4u) << "not split: the trace shows no pieces";
      ASSERT_EQ(got.y.size(), expected.y.size());
      for (std::size_t i = 0; i < got.y.size(); ++i) ASSERT_EQ(got.y[i], expected.y[i]) << "element " << i;
    }
  }
}

TEST(RemoteAutoChunk, SmallTaskAndCpuTaskAreNotSplit) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(server, true));
  const std::vector<Case> cases = chunkable_cases();  // kept: a reference into a temporary dangled
  const Case& axpy = cases[4];
  // 64 KiB: under four pieces of the smallest size worth sending.
  EXPECT_EQ(run_case(rt, server, axpy, 1, 8192).pieces, 0u);
  // Large, but on the CPU: its data is already there, nothing to overlap.
  auto x = rt.buffer<double>(4'000'037), y = rt.buffer<double>(4'000'037);
  const std::size_t before = rt.trace()->tasks().size();
  rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 0.5, ferry::on(ferry::cpu())).wait();
  const auto spans = rt.trace()->tasks();
  ASSERT_EQ(spans.size(), before + 1);
  EXPECT_EQ(spans.back().name, "axpy");
}

TEST(RemoteAutoChunk, FailedPiecesFailTheTask) {
  FerrydProcess server;
  ferry::Runtime rt(options_for(server, true));
  const auto remote = ferry::on(ferry::remote(server.address()));
  auto a = rt.buffer<double>(2048, 2048), b = rt.buffer<double>(2048, 2048);
  auto x = rt.buffer<double>(4'000'037), y = rt.buffer<double>(4'000'037);
  rt.submit("fill", ferry::write(a), -1.0, remote);
  rt.submit("potrf", ferry::readwrite(a), remote);  // not positive definite: fails
  // Every piece reads what failed: the task fails, naming the cause.
  ferry::Task reader = rt.submit("map", ferry::read(a), ferry::write(b), "scale", 2.0, remote);
  ferry::Task independent = rt.submit("copy", ferry::read(x), ferry::write(y), remote);
  try {
    reader.wait();
    ADD_FAILURE() << "the task whose pieces read a failed task's output succeeded";
  } catch (const ferry::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("potrf"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(independent.wait());
  std::size_t pieces = 0;
  for (const auto& span : rt.trace()->tasks()) pieces += span.name.starts_with("copy[") ? 1 : 0;
  EXPECT_GE(pieces, 4u) << "the independent copy was not split";
  EXPECT_THROW(rt.wait(), ferry::KernelError);
}

}  // namespace
