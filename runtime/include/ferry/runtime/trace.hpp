// Recording what ran where and when, written as Chrome trace-event JSON
// (opens in Perfetto) with one lane per CPU worker (later per GPU stream and
// link direction), and summarised: tasks and busy share per device, the
// critical path.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

struct TaskSpan {
  std::uint64_t task_id = 0;
  std::string name;
  std::string kernel;
  std::string device;    // the device's name
  int lane = 0;          // from Trace::lane()
  std::int64_t start_ns = 0;  // since the trace began
  std::int64_t end_ns = 0;
  std::vector<std::uint64_t> predecessors;  // task ids this one waited for
  bool failed = false;
};

struct TransferSpan {
  std::string what;      // "ship x", "fetch x": the direction and the buffer
  std::string link;      // "host->cuda:0"
  std::string buffer;    // the buffer moved, where known
  std::string task;      // the task it was moved for, where known
  int lane = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::size_t bytes = 0;
};

struct TraceSummary {
  struct PerDevice {
    std::string device;
    std::size_t tasks = 0;
    double busy_seconds = 0;
    double busy_share = 0;  // busy_seconds / (wall * lanes of the device)
    int lanes = 0;
  };
  std::size_t tasks = 0;
  std::size_t failed = 0;
  double wall_seconds = 0;           // first start to last end
  double critical_path_seconds = 0;  // longest chain of dependent tasks by measured durations
  std::size_t critical_path_tasks = 0;
  std::size_t transfers = 0;
  std::size_t bytes_moved = 0;
  std::vector<PerDevice> devices;
  std::string to_text() const;
};

class Trace {
 public:
  Trace();
  ~Trace();

  // Nanoseconds since this trace began (steady clock).
  std::int64_t now_ns() const noexcept;
  // A lane id for a named lane ("cpu worker 0"), created on first use; thread-safe.
  int lane(const std::string& name, const std::string& device);

  // Thread-safe; cheap enough for every task when tracing is on.
  void record(TaskSpan span);
  void record(TransferSpan span);

  std::vector<TaskSpan> tasks() const;
  std::vector<TransferSpan> transfers() const;
  TraceSummary summary() const;
  // {"traceEvents": [...], "displayTimeUnit": "ms"} with process/thread name metadata.
  std::string chrome_json() const;
  // Throws ferry::Error naming the path when it cannot be written.
  void write_chrome_json(const std::filesystem::path& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
