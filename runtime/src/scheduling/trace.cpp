#include "ferry/runtime/trace.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <unistd.h>
#include <unordered_map>

#include "ferry/error.hpp"
#include "ferry/units.hpp"

namespace ferry {

namespace {

struct Lane {
  std::string name;
  std::string device;
};

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }
double micros(std::int64_t ns) { return static_cast<double>(ns) * 1e-3; }
// A span recorded with its ends swapped (clock misuse) must not make busy time negative.
std::int64_t duration_ns(std::int64_t start, std::int64_t end) { return std::max<std::int64_t>(end - start, 0); }

std::string format_duration(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1.0) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

struct CriticalPath {
  std::int64_t ns = 0;
  std::size_t tasks = 0;
};

// A transfer's trace-event args: its size and link, and the buffer and task
// it was for where known (Perfetto shows them when the slice is selected).
nlohmann::json transfer_args(const TransferSpan& x) {
  nlohmann::json args{{"bytes", x.bytes}, {"link", x.link}};
  if (!x.buffer.empty()) args["buffer"] = x.buffer;
  if (!x.task.empty()) args["task"] = x.task;
  return args;
}

// Longest duration-weighted path through the predecessor DAG, by Kahn's
// topological order so a 100k-task chain needs no recursion. Predecessors
// missing from the trace are ignored; tasks on a cycle (impossible from the
// runtime, possible from hand-built spans) are left out rather than looping.
CriticalPath critical_path(const std::vector<TaskSpan>& tasks) {
  const std::size_t n = tasks.size();
  std::unordered_map<std::uint64_t, std::size_t> index;
  index.reserve(n);
  for (std::size_t i = 0; i < n; ++i) index.emplace(tasks[i].task_id, i);

  std::vector<std::vector<std::size_t>> successors(n);
  std::vector<std::size_t> waiting(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint64_t pred : tasks[i].predecessors) {
      auto it = index.find(pred);
      if (it == index.end() || it->second == i) continue;
      successors[it->second].push_back(i);
      ++waiting[i];
    }
  }

  std::vector<CriticalPath> best(n);
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) ready.push_back(i);
  CriticalPath longest;
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    best[i].ns += duration_ns(tasks[i].start_ns, tasks[i].end_ns);
    best[i].tasks += 1;
    if (best[i].ns > longest.ns || (best[i].ns == longest.ns && best[i].tasks > longest.tasks)) longest = best[i];
    for (std::size_t s : successors[i]) {
      if (best[i].ns > best[s].ns || (best[i].ns == best[s].ns && best[i].tasks > best[s].tasks)) best[s] = best[i];
      if (--waiting[s] == 0) ready.push_back(s);
    }
  }
  return longest;
}

}  // namespace

struct Trace::Impl {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  mutable std::mutex lanes_mutex;
  std::vector<Lane> lanes;
  std::unordered_map<std::string, int> lane_ids;

  // Separate from lanes_mutex so lane lookups never wait behind a burst of records.
  mutable std::mutex spans_mutex;
  std::vector<TaskSpan> tasks;
  std::vector<TransferSpan> transfers;

  std::vector<Lane> lanes_snapshot() const {
    std::lock_guard lock(lanes_mutex);
    return lanes;
  }
  std::pair<std::vector<TaskSpan>, std::vector<TransferSpan>> spans_snapshot() const {
    std::lock_guard lock(spans_mutex);
    return {tasks, transfers};
  }
};

Trace::Trace() : impl_(std::make_unique<Impl>()) {}
Trace::~Trace() = default;

std::int64_t Trace::now_ns() const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - impl_->start).count();
}

int Trace::lane(const std::string& name, const std::string& device) {
  std::lock_guard lock(impl_->lanes_mutex);
  auto [it, inserted] = impl_->lane_ids.try_emplace(name, static_cast<int>(impl_->lanes.size()));
  if (inserted) impl_->lanes.push_back({name, device});
  return it->second;
}

void Trace::record(TaskSpan span) {
  std::lock_guard lock(impl_->spans_mutex);
  impl_->tasks.push_back(std::move(span));
}

void Trace::record(TransferSpan span) {
  std::lock_guard lock(impl_->spans_mutex);
  impl_->transfers.push_back(std::move(span));
}

std::vector<TransferSpan> Trace::transfers() const {
  std::lock_guard lock(impl_->spans_mutex);
  return impl_->transfers;
}

std::vector<TaskSpan> Trace::tasks() const {
  std::lock_guard lock(impl_->spans_mutex);
  return impl_->tasks;
}

TraceSummary Trace::summary() const {
  const auto [tasks, transfers] = impl_->spans_snapshot();
  TraceSummary out;
  out.tasks = tasks.size();
  out.transfers = transfers.size();

  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  auto widen = [&](std::int64_t start, std::int64_t end) {
    first = std::min(first, start);
    last = std::max(last, end);
  };

  struct DeviceTally {
    std::size_t tasks = 0;
    std::int64_t busy_ns = 0;
    std::set<int> lanes;
  };
  std::map<std::string, DeviceTally> devices;  // ordered, so reports are stable run to run
  for (const TaskSpan& t : tasks) {
    widen(t.start_ns, t.end_ns);
    if (t.failed) ++out.failed;
    DeviceTally& d = devices[t.device];
    ++d.tasks;
    d.busy_ns += duration_ns(t.start_ns, t.end_ns);
    d.lanes.insert(t.lane);
  }
  for (const TransferSpan& x : transfers) {
    widen(x.start_ns, x.end_ns);
    out.bytes_moved += x.bytes;
  }
  out.wall_seconds = last > first ? seconds(last - first) : 0.0;

  for (const auto& [name, d] : devices) {
    TraceSummary::PerDevice p;
    p.device = name;
    p.tasks = d.tasks;
    p.busy_seconds = seconds(d.busy_ns);
    p.lanes = static_cast<int>(d.lanes.size());
    if (out.wall_seconds > 0) p.busy_share = p.busy_seconds / (out.wall_seconds * p.lanes);
    out.devices.push_back(std::move(p));
  }

  const CriticalPath path = critical_path(tasks);
  out.critical_path_seconds = seconds(path.ns);
  out.critical_path_tasks = path.tasks;
  return out;
}

std::string TraceSummary::to_text() const {
  std::string text = fmt::format("{} ({} failed) in {}; critical path {} over {}\n", plural(tasks, "task"), failed,
                                 format_duration(wall_seconds), format_duration(critical_path_seconds),
                                 plural(critical_path_tasks, "task"));
  for (const PerDevice& d : devices)
    text += fmt::format("{}: {}, {}, busy {:.0f} %\n", d.device, plural(d.tasks, "task"),
                         plural(static_cast<std::size_t>(d.lanes), "lane"), d.busy_share * 100.0);
  text += fmt::format("transfers: {}, {} moved\n", transfers, format_bytes(bytes_moved));
  return text;
}

std::string Trace::chrome_json() const {
  const std::vector<Lane> lanes = impl_->lanes_snapshot();
  const auto [tasks, transfers] = impl_->spans_snapshot();

  using nlohmann::json;
  json events = json::array();
  events.push_back({{"ph", "M"}, {"pid", 1}, {"name", "process_name"}, {"args", {{"name", "ferry"}}}});
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const int tid = static_cast<int>(i);
    events.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_name"},
                      {"args", {{"name", lanes[i].name}}}});
    events.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_sort_index"},
                      {"args", {{"sort_index", tid}}}});
  }
  for (const TaskSpan& t : tasks) {
    events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", t.lane}, {"name", t.name}, {"cat", "task"},
                      {"ts", micros(t.start_ns)}, {"dur", micros(duration_ns(t.start_ns, t.end_ns))},
                      {"args", {{"kernel", t.kernel}, {"device", t.device}, {"task_id", t.task_id},
                                {"predecessors", t.predecessors}, {"failed", t.failed}}}});
  }
  // Dependency arrows: a flow from each predecessor (bound to its slice by
  // its start) to the task (bound to the slice that begins there).
  std::unordered_map<std::uint64_t, const TaskSpan*> by_id;
  for (const TaskSpan& t : tasks) by_id.emplace(t.task_id, &t);
  std::uint64_t flow = 0;
  for (const TaskSpan& t : tasks) {
    for (std::uint64_t pred : t.predecessors) {
      const auto it = by_id.find(pred);
      if (it == by_id.end()) continue;  // before the trace began, or not traced
      ++flow;
      const TaskSpan& p = *it->second;
      events.push_back({{"ph", "s"}, {"pid", 1}, {"tid", p.lane}, {"name", "dependency"}, {"cat", "dependency"},
                        {"id", flow}, {"ts", micros(p.start_ns)}});
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"pid", 1}, {"tid", t.lane}, {"name", "dependency"},
                        {"cat", "dependency"}, {"id", flow}, {"ts", micros(t.start_ns)}});
    }
  }
  for (const TransferSpan& x : transfers) {
    events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", x.lane}, {"name", x.what.empty() ? x.link : x.what},
                      {"cat", "transfer"}, {"ts", micros(x.start_ns)},
                      {"dur", micros(duration_ns(x.start_ns, x.end_ns))},
                      {"args", transfer_args(x)}});
  }
  const json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  // Replace, not throw, on invalid UTF-8 in a task name: a trace is diagnostics and must still be written.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Trace::write_chrome_json(const std::filesystem::path& path) const {
  const std::string text = chrome_json();
  // Written beside the target and renamed, so a reader never sees half a trace.
  std::filesystem::path temp = path;
  temp += fmt::format(".tmp{}", ::getpid());
  auto fail = [&](const std::string& reason) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw Error(fmt::format("cannot write trace to '{}': {}", path.string(), reason));
  };

  errno = 0;
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  if (!out) fail(errno != 0 ? std::strerror(errno) : "cannot open file");
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) fail(errno != 0 ? std::strerror(errno) : "write failed");
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) fail(ec.message());
}

}  // namespace ferry
