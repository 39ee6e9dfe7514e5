// A run sent to a remote host before its task was ready, behind its
// predecessors there (chain_forwarding.cpp): what is left to do when the
// task's turn comes is to take the reply and settle it.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>

#include "data/task_record.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::detail {

struct ForwardedRun {
  std::future<protocol::Message> reply;
  TaskViews views;  // the task drops its own at finish
  RecordVector<std::uint64_t> ids;
  std::chrono::steady_clock::time_point start;
  std::int64_t start_ns = 0;
};

}  // namespace ferry::detail
