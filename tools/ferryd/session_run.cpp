// Runs: a client's kernel call turned into a runtime task, answered from
// the task's continuation by way of the progress thread.
#include <fmt/format.h>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/runtime.hpp"
#include "session.hpp"

namespace ferry::ferryd {

using protocol::Status;

void Session::on_run(const protocol::Run& run) {
  auto refuse = [&](Status status, std::string message) {
    send(protocol::Done{run.request, status, 0.0, std::nullopt, std::move(message)});
  };
  KernelRef kernel;
  try {
    kernel = server_.runtime.find_kernel(run.kernel);
  } catch (const UsageError& e) {
    return refuse(Status::unknown_kernel, e.what());
  }

  std::vector<TaskArg> args;
  args.reserve(run.args.size());
  Run record{run.request, {}};
  for (std::size_t i = 0; i < run.args.size(); ++i) {
    const protocol::RunArg& arg = run.args[i];
    switch (arg.kind) {
      case protocol::RunArg::Kind::buffer: {
        auto it = replicas_.find(arg.buffer);
        if (it == replicas_.end())
          return refuse(Status::unknown_buffer,
                        fmt::format("argument {}: buffer {} is not held for this client", i + 1, arg.buffer));
        const auto mode = static_cast<AccessMode>(arg.mode);  // the two enums share their order
        if (writes(mode)) record.written.push_back(arg.buffer);
        args.emplace_back(BufferAccess{it->second->buffer.state(), mode});
        break;
      }
      case protocol::RunArg::Kind::real: args.emplace_back(std::in_place_type<ScalarValue>, arg.real); break;
      case protocol::RunArg::Kind::integer: args.emplace_back(std::in_place_type<ScalarValue>, arg.integer); break;
      case protocol::RunArg::Kind::text:
        args.emplace_back(std::in_place_type<ScalarValue>, std::in_place_type<std::string>, arg.text);
        break;
    }
  }

  std::string name = run.task.empty() ? fmt::format("{}#{}", run.kernel, run.request) : run.task;
  Task task;
  try {
    task = server_.runtime.submit_args(run.kernel, std::move(args), cpu(), std::move(name));
  } catch (const UsageError& e) {
    return refuse(Status::bad_arguments, e.what());
  } catch (const OutOfMemory& e) {
    return refuse(Status::out_of_memory, e.what());
  } catch (const Error& e) {
    return refuse(Status::internal, e.what());
  }

  const std::uint64_t seq = next_run_++;
  runs_.emplace(seq, std::move(record));
  const bool scalar = kernel.def->returns_scalar;
  std::weak_ptr<Session> session = weak_from_this();
  std::weak_ptr<transport::Worker> worker = server_.worker;
  // Runs on the runtime worker that finished the task: only read the task
  // here; the session is touched on the progress thread.
  task.then([session, worker, seq, scalar, request = run.request](const Task& t) {
    protocol::Done done{request, Status::ok, t.run_seconds(), std::nullopt, {}};
    try {
      t.wait();  // already finished: throws at once if it failed
      if (scalar) done.result = t.result();
    } catch (const std::exception& e) {
      done.status = Status::kernel_failed;
      done.message = e.what();
    }
    if (auto w = worker.lock())
      w->post([session, seq, done = std::move(done)]() mutable {
        if (auto self = session.lock()) self->run_finished(seq, std::move(done));
      });
  });
}

void Session::run_finished(std::uint64_t seq, protocol::Done done) {
  auto it = runs_.find(seq);
  // Gone: already answered with shutting_down, or the client left.
  if (it == runs_.end()) return;
  if (done.status != Status::ok) {
    for (std::uint64_t id : it->second.written)
      if (auto r = replicas_.find(id); r != replicas_.end())
        r->second->spoiled = fmt::format("buffer {} was written by a task that failed: {}", id, done.message);
    log().info("client {}: run {} failed: {}", describe(), done.request, done.message);
  }
  runs_.erase(it);
  ++counters_.tasks;
  server_.metrics.task_done();
  send(done);
}

}  // namespace ferry::ferryd
