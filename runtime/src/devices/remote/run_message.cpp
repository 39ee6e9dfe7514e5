#include "devices/remote/run_message.hpp"

#include <string>
#include <variant>

#include "base/transfer_label.hpp"

namespace ferry::detail {

void marshal(TaskRecord* task, std::span<const std::shared_ptr<BufferState>> views, NodeLink& node,
             std::uint64_t request, Marshalled& out) {
  const TaskLabelScope transfers_for(task->name);
  protocol::Run& run = out.run;
  run.request = request;
  run.kernel = task->kernel->name;
  run.task = task->name;
  out.ids.assign(task->buffers.size(), 0);
  run.args.clear();  // a reused run (try_forward's) keeps its capacity
  run.args.reserve(task->args.items.size());
  std::size_t b = 0;
  for (std::size_t i = 0; i < task->args.items.size(); ++i) {
    const Arg& arg = task->args.items[i];
    protocol::RunArg wire_arg;
    const auto* scalar = std::get_if<ScalarValue>(&arg);
    if (scalar == nullptr) {
      const AccessMode mode = std::get<BufferArg>(arg).mode;
      out.ids[b] = acquire_on_node(*views[b], mode, node);
      wire_arg.kind = protocol::RunArg::Kind::buffer;
      wire_arg.buffer = out.ids[b];
      wire_arg.mode = wire(mode);
      ++b;
    } else if (const auto* d = std::get_if<double>(scalar)) {
      wire_arg.kind = protocol::RunArg::Kind::real;
      wire_arg.real = *d;
    } else if (const auto* n = std::get_if<std::int64_t>(scalar)) {
      wire_arg.kind = protocol::RunArg::Kind::integer;
      wire_arg.integer = *n;
    } else {
      wire_arg.kind = protocol::RunArg::Kind::text;
      wire_arg.text = std::get<std::string>(*scalar);
    }
    run.args.push_back(std::move(wire_arg));
  }
}

void unpin(std::span<const std::shared_ptr<BufferState>> views, std::span<const std::uint64_t> ids,
           NodeLink& node) noexcept {
  for (std::size_t i = 0; i < ids.size() && i < views.size(); ++i)
    if (ids[i] != 0) release_on_node(*views[i], node, ids[i]);
}

}  // namespace ferry::detail
