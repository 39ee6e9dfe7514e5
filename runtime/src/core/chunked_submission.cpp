// Automatic chunking at submission: which tasks, into how many pieces
// (plan_chunks over the measured link and the perf model), and the pieces.
#include "core/chunked_submission.hpp"

#include <algorithm>
#include <bit>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "core/core.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/auto_chunk.hpp"

namespace ferry::detail {

namespace {

// A row (or element) range of `parent`, the way Buffer::split cuts one.
std::shared_ptr<BufferState> piece_view(const BufferState& parent, bool by_rows, std::size_t begin, std::size_t end) {
  auto view = std::make_shared<BufferState>();
  view->root = parent.root;
  view->region = parent.region;
  if (by_rows) {
    view->region.row0 += begin;
    view->region.rows = end - begin;
  } else {
    view->region.col0 += begin;
    view->region.cols = end - begin;
  }
  view->id = parent.id;
  view->name = fmt::format("{}[{}:{}]", parent.name, begin, end);
  return view;
}

// Reads a piece's output on the CPU and does nothing with it: running it
// brings that range home (acquire_on_host) while later pieces still compute,
// which is the pipeline's third stage. Not in any registry: never named by users.
std::shared_ptr<const KernelDef> bring_home_kernel() {
  static const auto kernel = [] {
    auto k = std::make_shared<KernelDef>();
    k->name = "bring_home";
    k->summary = "brings a piece of an automatically split task home";
    k->params = {Param{"x", ParamKind::buffer, AccessMode::read, {}, std::nullopt}};
    k->cpu = [](ExecContext&) {};
    return std::shared_ptr<const KernelDef>(std::move(k));
  }();
  return kernel;
}

std::uint64_t cpu_bit(const RuntimeCore& core) {
  for (std::size_t i = 0; i < core.devices().size(); ++i)
    if (core.devices()[i]->kind() == DeviceKind::cpu) return std::uint64_t{1} << i;
  return 0;
}

}  // namespace

std::size_t submit_pieces(TaskRecord& whole) {
  RuntimeCore& core = *whole.core;
  Device& device = *whole.device;
  // A CPU task has nothing to overlap: its data is already where it runs.
  if (!core.options().auto_chunk || !whole.kernel->chunkable || device.kind() == DeviceKind::cpu) return 0;
  if (whole.buffers.empty()) return 0;

  // Elementwise and row-wise kernels take buffers of one shape; cut them all alike.
  const BufferArg& first = whole.buffer_arg(0);
  std::size_t bytes_in = 0, bytes_out = 0;
  for (std::size_t i = 0; i < whole.buffers.size(); ++i) {
    const BufferArg& b = whole.buffer_arg(i);
    if (b.rows != first.rows || b.cols != first.cols) return 0;
    if (reads(b.mode)) bytes_in += b.bytes();
    if (writes(b.mode)) bytes_out += b.bytes();
  }
  // The join waits for its pieces through what they write.
  if (bytes_out == 0) return 0;

  const bool by_rows = first.rows > 1;
  const std::size_t extent = by_rows ? first.rows : first.cols;
  const ChunkPolicy& policy = core.options().chunk_policy;
  // Settled by size alone for nearly every task, before the perf model is
  // asked; under explain the plan still says why it was not split.
  if (!core.options().explain && !may_split(std::max(bytes_in, bytes_out), extent, policy)) return 0;
  ChunkInput in;
  in.extent = extent;
  in.bytes_in = bytes_in;
  in.bytes_out = bytes_out;
  in.to_device = core.links().get(host_node, device.node());
  in.from_device = core.links().get(device.node(), host_node);
  const Cost hint = whole.kernel->cost ? whole.kernel->cost(whole.args) : Cost{};
  in.compute_seconds = core.models().estimate(whole.kernel->name, device.perf_key(), whole.bytes, hint, device.peak()).seconds;
  in.launch_seconds = device.peak().launch_seconds;
  const ChunkPlan plan = plan_chunks(in, policy);
  if (core.options().explain)
    log().info("{} on {}: {}", whole.label(), device.name(),
               plan.chunks > 1 ? "split into " + plan.reason : "not split: " + plan.reason);
  if (plan.chunks < 2) return 0;

  std::uint64_t bit = 0;
  for (std::size_t i = 0; i < core.devices().size(); ++i)
    if (core.devices()[i].get() == &device) bit = std::uint64_t{1} << i;
  const auto ranges = chunk_ranges(in.extent, plan.chunks);
  for (std::size_t p = 0; p < ranges.size(); ++p) {
    const auto [begin, end] = ranges[p];
    PreparedTask piece;
    piece.kernel = whole.kernel;
    piece.name = fmt::format("{}[{}/{}]", whole.name, p + 1, ranges.size());
    piece.args = whole.args;
    piece.buffer_args = whole.buffer_args;
    piece.eligible = bit;  // the whole was placed there; its pieces pipeline there
    piece.piece = true;
    for (std::size_t i = 0; i < whole.buffers.size(); ++i) {
      BufferArg& b = buffer_arg(piece.args, piece.buffer_args, i);
      (by_rows ? b.rows : b.cols) = end - begin;
      piece.bytes += b.bytes();
      piece.buffers.push_back(piece_view(*whole.buffers[i], by_rows, begin, end));
    }
    std::vector<std::shared_ptr<BufferState>> outputs;
    for (std::size_t i = 0; i < piece.buffers.size(); ++i)
      if (writes(piece.buffer_arg(i).mode)) outputs.push_back(piece.buffers[i]);
    core.submit(std::move(piece));
    // Each output comes home as soon as its piece is done, on a CPU worker.
    const std::uint64_t cpu = cpu_bit(core);
    for (std::size_t o = 0; cpu != 0 && o < outputs.size(); ++o) {
      PreparedTask home;
      home.kernel = bring_home_kernel();
      home.name = fmt::format("{}[{}/{}] home", whole.name, p + 1, ranges.size());
      const BufferState& view = *outputs[o];
      const BufferArg arg{nullptr, view.root->dtype, view.region.rows, view.region.cols, view.ld(), AccessMode::read};
      home.bytes = arg.bytes();
      home.args.items.emplace_back(arg);
      home.buffers.push_back(outputs[o]);
      home.buffer_args.push_back(0);
      home.eligible = cpu;
      home.piece = true;
      core.submit(std::move(home));
    }
  }
  whole.explanation += fmt::format("{}automatically split: {}", whole.explanation.empty() ? "" : "\n", plan.reason);
  return ranges.size();
}

}  // namespace ferry::detail
