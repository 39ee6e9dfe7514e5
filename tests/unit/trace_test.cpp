#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ferry/error.hpp"
#include "ferry/runtime/trace.hpp"

namespace {

using ferry::TaskSpan;
using ferry::Trace;
using ferry::TransferSpan;

TaskSpan span(std::uint64_t id, const std::string& device, int lane, std::int64_t start, std::int64_t end,
              std::vector<std::uint64_t> preds = {}) {
  TaskSpan t;
  t.task_id = id;
  t.name = "task " + std::to_string(id);
  t.kernel = "axpy";
  t.device = device;
  t.lane = lane;
  t.start_ns = start;
  t.end_ns = end;
  t.predecessors = std::move(preds);
  return t;
}

// A diamond a -> {b, c} -> d on two CPU lanes, with c the longer branch, and
// one transfer: every summary number below follows by hand from these spans.
Trace& diamond(Trace& trace) {
  const int w0 = trace.lane("cpu worker 0", "cpu");
  const int w1 = trace.lane("cpu worker 1", "cpu");
  const int g0 = trace.lane("cuda:0 stream 0", "cuda:0");
  const int link = trace.lane("host->cuda:0", "cuda:0");
  trace.record(span(1, "cpu", w0, 0, 1000));
  trace.record(span(2, "cpu", w0, 1000, 3000, {1}));
  trace.record(span(3, "cpu", w1, 1000, 6000, {1, 999}));  // 999 is not in the trace
  trace.record(span(4, "cuda:0", g0, 7000, 8000, {2, 3}));
  TransferSpan x;
  x.what = "A";
  x.link = "host->cuda:0";
  x.lane = link;
  x.start_ns = 6000;
  x.end_ns = 7000;
  x.bytes = std::size_t{3} << 20;
  trace.record(x);
  return trace;
}

// A transfer's event names the buffer it moved and the task it was for, where known.
TEST(Trace, TransfersCarryTheirBufferAndTask) {
  Trace trace;
  const int link = trace.lane("host->remote:gpu1", "remote:gpu1");
  TransferSpan named;
  named.what = "ship x";
  named.link = "host->remote:gpu1";
  named.buffer = "x";
  named.task = "update";
  named.lane = link;
  named.end_ns = 100;
  named.bytes = 64;
  trace.record(named);
  TransferSpan anonymous = named;
  anonymous.what = "ship";
  anonymous.buffer.clear();
  anonymous.task.clear();
  trace.record(anonymous);
  std::map<std::string, nlohmann::json> args;
  const auto doc = nlohmann::json::parse(trace.chrome_json());
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == "transfer") args[e.at("name").get<std::string>()] = e.at("args");
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args.at("ship x").at("buffer"), "x");
  EXPECT_EQ(args.at("ship x").at("task"), "update");
  EXPECT_EQ(args.at("ship x").at("bytes"), 64u);
  EXPECT_FALSE(args.at("ship").contains("buffer")) << args.at("ship");
  EXPECT_FALSE(args.at("ship").contains("task")) << args.at("ship");
}

TEST(Trace, LanesAreStableSmallIntegers) {
  Trace trace;
  const int a = trace.lane("cpu worker 0", "cpu");
  const int b = trace.lane("cpu worker 1", "cpu");
  EXPECT_NE(a, b);
  EXPECT_EQ(trace.lane("cpu worker 0", "cpu"), a);
  EXPECT_GE(a, 0);
  EXPECT_LT(b, 2);
}

TEST(Trace, NowIsMonotonic) {
  Trace trace;
  const auto t0 = trace.now_ns();
  const auto t1 = trace.now_ns();
  EXPECT_GE(t0, 0);
  EXPECT_GE(t1, t0);
}

TEST(Trace, ChromeJsonHasOneEventPerTaskAndNamesLanes) {
  Trace trace;
  diamond(trace);
  const auto doc = nlohmann::json::parse(trace.chrome_json());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");

  std::map<std::string, nlohmann::json> tasks;
  std::map<int, std::string> lane_names;
  int transfers = 0;
  bool process_named = false;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") process_named = e.at("args").at("name") == "ferry";
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      lane_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (e.at("ph") == "X" && e.at("cat") == "task") tasks[e.at("name").get<std::string>()] = e;
    if (e.at("ph") == "X" && e.at("cat") == "transfer") {
      ++transfers;
      EXPECT_EQ(e.at("args").at("bytes"), std::size_t{3} << 20);
      EXPECT_EQ(e.at("args").at("link"), "host->cuda:0");
    }
  }
  EXPECT_TRUE(process_named);
  EXPECT_EQ(transfers, 1);
  ASSERT_EQ(tasks.size(), 4u);

  const auto& c = tasks.at("task 3");
  EXPECT_DOUBLE_EQ(c.at("ts").get<double>(), 1.0);    // 1000 ns
  EXPECT_DOUBLE_EQ(c.at("dur").get<double>(), 5.0);   // 5000 ns
  EXPECT_EQ(c.at("pid"), 1);
  EXPECT_EQ(c.at("tid"), trace.lane("cpu worker 1", "cpu"));
  EXPECT_EQ(c.at("args").at("kernel"), "axpy");
  EXPECT_EQ(c.at("args").at("device"), "cpu");
  EXPECT_EQ(c.at("args").at("task_id"), 3u);
  EXPECT_EQ(c.at("args").at("predecessors"), (std::vector<std::uint64_t>{1, 999}));
  EXPECT_EQ(c.at("args").at("failed"), false);
  EXPECT_DOUBLE_EQ(tasks.at("task 4").at("ts").get<double>(), 7.0);

  EXPECT_EQ(lane_names.at(trace.lane("cpu worker 0", "cpu")), "cpu worker 0");
  EXPECT_EQ(lane_names.at(trace.lane("cuda:0 stream 0", "cuda:0")), "cuda:0 stream 0");
  EXPECT_EQ(lane_names.size(), 4u);
}

// Each dependency inside the trace is a flow (an arrow in Perfetto): a start
// on the predecessor's lane and a finish on the task's, sharing an id.
TEST(Trace, ChromeJsonDrawsDependencyArrows) {
  Trace trace;
  diamond(trace);
  const auto doc = nlohmann::json::parse(trace.chrome_json());
  std::map<std::uint64_t, std::pair<nlohmann::json, nlohmann::json>> flows;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "s") flows[e.at("id").get<std::uint64_t>()].first = e;
    if (e.at("ph") == "f") flows[e.at("id").get<std::uint64_t>()].second = e;
  }
  // 1->2, 1->3, 2->4, 3->4; 999 is not in the trace.
  ASSERT_EQ(flows.size(), 4u);
  std::multiset<std::pair<double, double>> arrows;  // (from start, to start) in µs
  for (const auto& [id, flow] : flows) {
    ASSERT_FALSE(flow.first.is_null()) << id;
    ASSERT_FALSE(flow.second.is_null()) << id;
    EXPECT_EQ(flow.second.at("bp"), "e");
    arrows.insert({flow.first.at("ts").get<double>(), flow.second.at("ts").get<double>()});
  }
  EXPECT_EQ(arrows, (std::multiset<std::pair<double, double>>{{0, 1}, {0, 1}, {1, 7}, {1, 7}}));
}

TEST(Trace, EmptyTraceIsValidJsonAndZeroSummary) {
  Trace trace;
  const auto doc = nlohmann::json::parse(trace.chrome_json());
  EXPECT_TRUE(doc.at("traceEvents").is_array());
  const auto s = trace.summary();
  EXPECT_EQ(s.tasks, 0u);
  EXPECT_EQ(s.wall_seconds, 0.0);
  EXPECT_EQ(s.critical_path_tasks, 0u);
  EXPECT_TRUE(s.devices.empty());
  EXPECT_FALSE(s.to_text().empty());
}

TEST(Trace, SummaryOfDiamondIsExact) {
  Trace trace;
  diamond(trace);
  const auto s = trace.summary();
  EXPECT_EQ(s.tasks, 4u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_DOUBLE_EQ(s.wall_seconds, 8e-6);
  // a (1000) + c (5000) + d (1000): the longer branch, not a + b + d = 4000.
  EXPECT_DOUBLE_EQ(s.critical_path_seconds, 7e-6);
  EXPECT_EQ(s.critical_path_tasks, 3u);
  EXPECT_EQ(s.transfers, 1u);
  EXPECT_EQ(s.bytes_moved, std::size_t{3} << 20);

  ASSERT_EQ(s.devices.size(), 2u);
  const auto& cpu = s.devices[0];
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_EQ(cpu.tasks, 3u);
  EXPECT_EQ(cpu.lanes, 2);
  EXPECT_DOUBLE_EQ(cpu.busy_seconds, 8e-6);
  EXPECT_DOUBLE_EQ(cpu.busy_share, 0.5);  // 8 us busy over 8 us wall on 2 lanes
  const auto& gpu = s.devices[1];
  EXPECT_EQ(gpu.device, "cuda:0");
  EXPECT_EQ(gpu.tasks, 1u);
  EXPECT_EQ(gpu.lanes, 1);
  EXPECT_DOUBLE_EQ(gpu.busy_share, 0.125);
}

TEST(Trace, CountsFailedTasks) {
  Trace trace;
  auto t = span(1, "cpu", 0, 0, 10);
  t.failed = true;
  trace.record(t);
  trace.record(span(2, "cpu", 0, 10, 20));
  EXPECT_EQ(trace.summary().failed, 1u);
  EXPECT_NE(trace.chrome_json().find("\"failed\":true"), std::string::npos);
}

// One of a thing is not "1 tasks" (issue 32).
TEST(Trace, SummaryTextCountsInWords) {
  Trace trace;
  trace.record(span(1, "cpu", 0, 0, 10));
  const std::string text = trace.summary().to_text();
  EXPECT_NE(text.find("1 task (0 failed)"), std::string::npos) << text;
  EXPECT_NE(text.find("over 1 task\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu: 1 task, 1 lane,"), std::string::npos) << text;
  trace.record(span(2, "cpu", 1, 0, 10));
  const std::string two = trace.summary().to_text();
  EXPECT_NE(two.find("cpu: 2 tasks, 2 lanes,"), std::string::npos) << two;
}

TEST(Trace, LongChainSummarisesWithoutRecursion) {
  constexpr std::uint64_t n = 100'000;
  Trace trace;
  // Recorded newest first, so the order of records is no hint to the topology.
  for (std::uint64_t i = n; i >= 1; --i)
    trace.record(span(i, "cpu", 0, static_cast<std::int64_t>(i - 1) * 10, static_cast<std::int64_t>(i) * 10,
                      i > 1 ? std::vector<std::uint64_t>{i - 1} : std::vector<std::uint64_t>{}));
  const auto s = trace.summary();
  EXPECT_EQ(s.tasks, n);
  EXPECT_EQ(s.critical_path_tasks, n);
  EXPECT_DOUBLE_EQ(s.critical_path_seconds, static_cast<double>(n) * 10e-9);
  EXPECT_DOUBLE_EQ(s.devices.at(0).busy_share, 1.0);
}

TEST(Trace, CycleInHandBuiltSpansDoesNotHang) {
  Trace trace;
  trace.record(span(1, "cpu", 0, 0, 10, {2}));
  trace.record(span(2, "cpu", 0, 10, 20, {1}));
  trace.record(span(3, "cpu", 0, 20, 30, {3}));  // waits for itself
  const auto s = trace.summary();
  EXPECT_EQ(s.critical_path_tasks, 1u);
}

TEST(Trace, ConcurrentRecordLosesNothing) {
  constexpr int threads = 4;
  constexpr int per_thread = 20'000;
  Trace trace;
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&trace, w] {
      const int lane = trace.lane("cpu worker " + std::to_string(w), "cpu");
      for (int i = 0; i < per_thread; ++i) {
        const auto id = static_cast<std::uint64_t>(w) * per_thread + static_cast<std::uint64_t>(i);
        const auto t0 = trace.now_ns();
        trace.record(span(id, "cpu", lane, t0, trace.now_ns()));
        if (i % 1000 == 0) {
          TransferSpan x;
          x.bytes = 1;
          trace.record(x);
        }
      }
    });
  }
  for (auto& t : workers) t.join();

  const auto tasks = trace.tasks();
  ASSERT_EQ(tasks.size(), std::size_t{threads} * per_thread);
  std::vector<bool> seen(tasks.size(), false);
  for (const auto& t : tasks) seen.at(t.task_id) = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), false), 0);
  const auto s = trace.summary();
  EXPECT_EQ(s.transfers, std::size_t{threads} * (per_thread / 1000));
  EXPECT_EQ(s.devices.at(0).lanes, threads);
}

TEST(Trace, WritesChromeJsonFile) {
  Trace trace;
  diamond(trace);
  const auto path = std::filesystem::temp_directory_path() / ("ferry_trace_test_" + std::to_string(::getpid()) + ".json");
  trace.write_chrome_json(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), trace.chrome_json());
  std::filesystem::remove(path);
}

TEST(Trace, UnwritablePathThrowsNamingIt) {
  Trace trace;
  diamond(trace);
  const std::string path = "/nonexistent-ferry-dir/sub/trace.json";
  try {
    trace.write_chrome_json(path);
    FAIL() << "expected ferry::Error";
  } catch (const ferry::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Trace, TextMentionsEachDevice) {
  Trace trace;
  diamond(trace);
  const std::string text = trace.summary().to_text();
  EXPECT_NE(text.find("4 tasks (0 failed)"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu: 3 tasks, 2 lanes, busy 50 %"), std::string::npos) << text;
  EXPECT_NE(text.find("cuda:0: 1 task, 1 lane,"), std::string::npos) << text;
  EXPECT_NE(text.find("transfers: 1, 3.00 MiB moved"), std::string::npos) << text;
}

}  // namespace
