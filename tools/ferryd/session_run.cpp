// Runs: a client's kernel call turned into a runtime task, answered from
// the task's continuation by way of the progress thread. And the kernels a
// client defines from CUDA source for its connection.
#include <fmt/format.h>

#include <thread>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/printable.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/runtime.hpp"
#include "session.hpp"

namespace ferry::ferryd {

using protocol::Status;

namespace {

// Each definition holds up to max_source_bytes: bound what one client can pin.
constexpr std::size_t max_session_kernels = 256;

bool same_definition(const KernelDef& a, const KernelDef& b) {
  if (!a.cuda_source || !b.cuda_source || !(*a.cuda_source == *b.cuda_source) || a.params.size() != b.params.size())
    return false;
  for (std::size_t i = 0; i < a.params.size(); ++i)
    if (a.params[i].mode != b.params[i].mode) return false;  // the same source with other `writes`
  return true;
}

}  // namespace

std::string clip(std::string text) {
  constexpr std::string_view cut = "\n... (cut)";
  if (text.size() > protocol::max_string_bytes) {
    text.resize(protocol::max_string_bytes - cut.size());
    text += cut;
  }
  return text;
}

void Session::on_define_kernel(const protocol::DefineKernel& define, transport::Incoming& incoming) {
  const std::uint64_t payload = incoming.payload_bytes();
  // decode() bounded source_bytes; the payload must be exactly that long.
  if (payload != define.source_bytes)
    return fail(Status::malformed, fmt::format("define_kernel '{}' announces {} bytes of source, but {} came with it",
                                               printable(define.name), define.source_bytes, payload));
  // A definition's source stays for the connection's life: it counts
  // against the quota like a replica, from before it is received.
  if (auto refusal = admit(payload, fmt::format("kernel '{}'", define.name), "define_kernel")) {
    audit("define_kernel", {{"kernel", define.name}, {"bytes", payload}, {"status", protocol::to_string(refusal->first)}});
    return send(protocol::Done{define.request, refusal->first, 0.0, std::nullopt, clip(std::move(refusal->second))});
  }
  charge(payload);
  auto source = std::make_shared<std::string>(payload, '\0');
  if (payload == 0) return kernel_received(define, {}, {});
  std::weak_ptr<Session> weak = weak_from_this();
  incoming.into(source->data(), [weak, define, source](const std::string& error) {
    if (auto self = weak.lock()) self->kernel_received(define, std::move(*source), error);
  });
}

void Session::kernel_received(const protocol::DefineKernel& define, std::string source, const std::string& error) {
  if (state_ == State::closed) return;
  const std::uint64_t charged = source.size();
  if (!error.empty())
    return kernel_parsed(define, nullptr, Status::internal, "receiving the kernel's source failed: " + error, charged);
  counters_.bytes_in += source.size();
  server_.metrics.bytes_in(source.size(), share_key_);
  if (define.name.empty())
    return kernel_parsed(define, nullptr, Status::bad_arguments, "define_kernel: the kernel needs a name", charged);
  if (!grant_.source_kernels)
    return kernel_parsed(
        define, nullptr, Status::bad_arguments,
        fmt::format("key '{}' may not define kernels from source (its source-kernels option)", grant_.name), charged);

  // Reading a megabyte of source is not for the progress thread, which
  // every client's messages wait on: a worker reads it and posts back,
  // taking each client's definitions in turn with the others'. Compiling it
  // is not even for that worker (one heavy source would hold up every
  // client's definitions): it gets a thread of its own, under this client's
  // budget, and its answer is posted back the same way.
  std::weak_ptr<Session> weak = weak_from_this();
  std::weak_ptr<transport::Worker> worker = server_.worker;
  auto answer = [weak, worker, define, charged](std::shared_ptr<KernelDef> def, Status status, std::string error) {
    if (auto w = worker.lock())
      w->post([weak, define, def = std::move(def), status, error = std::move(error), charged]() mutable {
        if (auto self = weak.lock()) self->kernel_parsed(define, std::move(def), status, error, charged);
      });
  };
  server_.background.post(share_key_, [answer, define, source = std::move(source), gpus = server_.gpu_ordinals,
                                       budget = compile_budget()]() mutable {
    std::shared_ptr<KernelDef> def;
    try {
      CudaSource cuda{std::move(source), define.entry, define.options};
      // Before anything compiles it: NVRTC is to read no file of this host's.
      confine_cuda_source(cuda);
      // Parsed now, so a bad signature is reported here.
      def = std::make_shared<KernelDef>(make_cuda_source_kernel(std::move(cuda), define.writes));
    } catch (const std::exception& e) {
      return answer(nullptr, dynamic_cast<const UsageError*>(&e) ? Status::bad_arguments : Status::internal, e.what());
    }
    // No GPU: nothing to compile for, and no run of it reaches one (the
    // client's runtime sees 0 GPUs in welcome and keeps it).
    if (gpus.empty()) return answer(std::move(def), Status::ok, {});
    // This thread only waits (the budget's own runs NVRTC) and ends by the
    // limit; the budget refuses at once past its running compiles, so one
    // client keeps few of these.
    std::thread([answer, def = std::move(def), gpus = std::move(gpus), budget = std::move(budget)]() mutable {
      try {
        compile_cuda_source(*def->cuda_source, gpus, *budget);
      } catch (const std::exception& e) {
        // A compile log names the headers NVRTC read or tried: not for the client.
        return answer(nullptr, dynamic_cast<const UsageError*>(&e) ? Status::bad_arguments : Status::internal,
                      without_paths(e.what()));
      }
      answer(std::move(def), Status::ok, {});
    }).detach();
  });
}

std::shared_ptr<CompileBudget> Session::compile_budget() {
  auto& budgets = server_.compile_budgets;
  // Forgotten once no definition of the client's is in flight and none of
  // its compiles runs, so the table stays as small as the clients compiling.
  std::erase_if(budgets, [](const auto& entry) { return entry.second.use_count() == 1 && entry.second->running() == 0; });
  auto& budget = budgets[share_key_];
  if (!budget) budget = std::make_shared<CompileBudget>(server_.limits.compile_limit);
  return budget;
}

void Session::kernel_parsed(const protocol::DefineKernel& define, std::shared_ptr<KernelDef> def, Status status,
                            const std::string& error, std::uint64_t charged) {
  // Closed: the charge went with the rest of the client's memory.
  if (state_ == State::closed) return;
  const std::string sha256 = def ? transport::sha256_hex(def->cuda_source->source) : std::string();
  // `kept`: the definition stays, and so does its charge against the quota.
  const auto reply = [&](Status s, std::string message, bool kept = false) {
    nlohmann::json record = {{"kernel", define.name}, {"entry", define.entry}, {"bytes", charged},
                             {"status", protocol::to_string(s)}};
    if (!sha256.empty()) record["sha256"] = sha256;
    if (!message.empty()) record["message"] = message;
    audit("define_kernel", std::move(record));
    if (!kept) uncharge(charged);
    send(protocol::Done{define.request, s, 0.0, std::nullopt, clip(std::move(message))});
  };
  if (status != Status::ok) {
    log().info("client {}: kernel '{}' refused: {}", describe(), printable(define.name), printable(error, 1024));
    return reply(status, error);
  }
  def->name = define.name;
  if (auto it = kernels_.find(define.name); it != kernels_.end()) {
    // The same again: nothing new is kept, so nothing more is charged.
    if (same_definition(*it->second.def, *def)) return reply(Status::ok, {});
    return reply(Status::bad_arguments,
                 fmt::format("kernel '{}' is already defined on this connection with another source, entry, options "
                             "or writes; give the new one another name",
                             define.name));
  }
  if (kernels_.size() >= max_session_kernels)
    return reply(Status::bad_arguments, fmt::format("kernel '{}': this connection already defined {} kernels, the most "
                                                    "ferryd keeps for one client",
                                                    define.name, max_session_kernels));
  log().info("client {}: defined kernel '{}' (CUDA entry {}, {} bytes of source)", describe(), printable(define.name),
             printable(define.entry), def->cuda_source->source.size());
  kernels_.emplace(define.name, KernelRef{std::shared_ptr<const KernelDef>(std::move(def))});
  reply(Status::ok, {}, /*kept=*/true);
}

void Session::Refused::add(std::uint64_t id) {
  if (!ids.insert(id).second) return;
  order.push_back(id);
  if (order.size() > keep) {
    ids.erase(order.front());
    order.pop_front();
  }
}

void Session::on_run(protocol::Run&& run) {
  auto refuse = [&](Status status, std::string message) {
    audit("task", {{"kernel", run.kernel}, {"task", run.task}, {"status", protocol::to_string(status)}, {"message", message}});
    refused_.add(run.request);
    send(protocol::Done{run.request, status, 0.0, std::nullopt, clip(std::move(message))});
  };
  // A forwarded run waits for earlier runs of this connection. Those that
  // reached the runtime order it there (it reads or writes what they do, and
  // runs arrive in the order they were sent); one that was refused never
  // made its outputs, so neither can this one.
  for (std::uint64_t before : run.after)
    if (refused_.ids.contains(before))
      return refuse(Status::bad_arguments,
                    fmt::format("run {} waits for run {}, which ferryd refused", run.request, before));
  KernelRef kernel;
  if (auto it = kernels_.find(run.kernel); it != kernels_.end()) {
    kernel = it->second;
  } else {
    try {
      kernel = server_.runtime.find_kernel(run.kernel);
    } catch (const UsageError& e) {
      return refuse(Status::unknown_kernel, e.what());
    }
    if (!grant_.plugins && server_.plugin_kernels.contains(run.kernel))
      return refuse(Status::bad_arguments,
                    fmt::format("kernel '{}' comes from a plugin, which key '{}' may not use", run.kernel, grant_.name));
  }

  // By definition: a kernel this client defined is not in the runtime's registry.
  const Place place = grant_.gpus ? server_.place_for(*kernel.def) : cpu();
  // On a GPU, a write-only buffer gets fresh device memory that is not
  // uploaded first, and what the kernel leaves unwritten there (another
  // client's data, from the pool) would come back: so it is uploaded, as
  // readwrite, from host memory that holds only this client's bytes or zeros.
  const bool on_gpu = place.kind == Place::Kind::gpu;
  std::vector<TaskArg> args;
  args.reserve(run.args.size());
  Run record;
  record.request = run.request;
  record.kernel = run.kernel;
  std::uint64_t& bytes_in = record.bytes_in;
  std::uint64_t& bytes_out = record.bytes_out;
  for (std::size_t i = 0; i < run.args.size(); ++i) {
    const protocol::RunArg& arg = run.args[i];
    switch (arg.kind) {
      case protocol::RunArg::Kind::buffer: {
        auto it = replicas_.find(arg.buffer);
        if (it == replicas_.end())
          return refuse(Status::unknown_buffer,
                        fmt::format("argument {}: buffer {} is not held for this client", i + 1, arg.buffer));
        auto mode = static_cast<AccessMode>(arg.mode);  // the two enums share their order
        Replica& replica = *it->second;
        // A task reads what no put wrote as zeros (and writes it whole, for all ferryd knows).
        replica.written.zero_unwritten(replica.host);
        if (writes(mode)) record.written.push_back(arg.buffer);
        if (reads(mode)) bytes_in += replica.bytes;
        if (writes(mode)) bytes_out += replica.bytes;
        if (on_gpu) record.on_gpu.push_back({it->second, writes(mode)});
        if (on_gpu && mode == AccessMode::write) mode = AccessMode::readwrite;
        args.emplace_back(BufferAccess{replica.buffer.state(), mode});
        break;
      }
      case protocol::RunArg::Kind::real: args.emplace_back(std::in_place_type<ScalarValue>, arg.real); break;
      case protocol::RunArg::Kind::integer: args.emplace_back(std::in_place_type<ScalarValue>, arg.integer); break;
      case protocol::RunArg::Kind::text:
        args.emplace_back(std::in_place_type<ScalarValue>, std::in_place_type<std::string>, arg.text);
        break;
    }
  }

  const LaneKind lane = place.kind == Place::Kind::gpu ? LaneKind::gpu : LaneKind::cpu;
  const std::uint64_t seq = next_run_++;
  runs_.emplace(seq, std::move(record));
  // Runs of one client start in the order they came, so those it forwarded
  // behind others still find them submitted first. The run and its
  // arguments move into the queued start: one allocation (the function's)
  // rather than copies of each.
  std::weak_ptr<Session> weak = weak_from_this();
  auto start = [weak, seq, run = std::move(run), kernel, args = std::move(args),
                place](const FairShare::Ticket& ticket) mutable {
    auto self = weak.lock();
    return self && self->start_run(seq, run, kernel, args, place, ticket);
  };
  server_.fair->submit(share_key_, grant_.weight, lane, std::move(start));
}

bool Session::start_run(std::uint64_t seq, const protocol::Run& run, const KernelRef& kernel,
                        std::vector<TaskArg>& args, Place place, const FairShare::Ticket& ticket) {
  // Answered already: the session closed or shut down while the run waited.
  auto record = runs_.find(seq);
  if (state_ == State::closed || record == runs_.end()) return false;
  auto refuse = [&](Status status, std::string message) {
    runs_.erase(record);
    audit("task", {{"kernel", run.kernel}, {"task", run.task}, {"status", protocol::to_string(status)}, {"message", message}});
    refused_.add(run.request);
    send(protocol::Done{run.request, status, 0.0, std::nullopt, clip(std::move(message))});
    return false;
  };
  // One it waits for may have been refused while this one was queued.
  for (std::uint64_t before : run.after)
    if (refused_.ids.contains(before))
      return refuse(Status::bad_arguments,
                    fmt::format("run {} waits for run {}, which ferryd refused", run.request, before));

  const std::uint64_t bytes_in = record->second.bytes_in, bytes_out = record->second.bytes_out;
  std::string name = run.task.empty() ? fmt::format("{}#{}", run.kernel, run.request) : run.task;
  Task task;
  try {
    task = server_.runtime.submit_args(kernel, std::move(args), place, std::move(name));
  } catch (const UsageError& e) {
    return refuse(Status::bad_arguments, e.what());
  } catch (const OutOfMemory& e) {
    return refuse(Status::out_of_memory, e.what());
  } catch (const Error& e) {
    return refuse(Status::internal, e.what());
  }
  // In the runtime now: what it writes stays on the GPU, and the GPU may
  // hold a copy of what it reads (Replica).
  for (const Run::GpuUse& use : record->second.on_gpu) {
    if (auto replica = use.replica.lock()) {
      ++replica->gpu_uses;
      if (use.writes) ++replica->gpu_writes;
    }
  }
  // In the order lanes were given: what a test of the fair share reads.
  // Checked first: building the record costs more than a short run (its JSON
  // would be built and thrown away for every task).
  if (server_.audit->enabled())
    audit("task_start",
          {{"kernel", run.kernel}, {"task", run.task}, {"share", ticket.client}, {"lane", to_string(ticket.lane)}});

  const bool scalar = kernel.def->returns_scalar;
  std::weak_ptr<Session> session = weak_from_this();
  std::weak_ptr<transport::Worker> worker = server_.worker;
  std::weak_ptr<FairShare> fair = server_.fair;
  // Audited from the task's own thread (the log is thread-safe), so a task
  // is recorded even when its client has gone by the time it finishes.
  std::shared_ptr<AuditLog> audit_log = server_.audit->enabled() ? server_.audit : nullptr;
  nlohmann::json audit_record;
  if (audit_log)
    audit_record = {{"peer", peer_}, {"client", client_}, {"kernel", run.kernel}, {"task", run.task},
                    {"bytes_in", bytes_in}, {"bytes_out", bytes_out}};
  // Runs on the runtime worker that finished the task: only read the task
  // here; the session is touched on the progress thread.
  task.then([session, worker, fair, ticket, seq, scalar, request = run.request, audit_log,
             audit_record](const Task& t) mutable {
    protocol::Done done{request, Status::ok, t.run_seconds(), std::nullopt, {}};
    try {
      t.wait();  // already finished: throws at once if it failed
      if (scalar) done.result = t.result();
    } catch (const std::exception& e) {
      done.status = Status::kernel_failed;
      // A compile log names the headers NVRTC read or tried: not for the client.
      done.message = clip(without_paths(e.what()));
    }
    if (audit_log) {
      audit_record["device"] = t.device();
      audit_record["duration_s"] = t.run_seconds();
      audit_record["status"] = protocol::to_string(done.status);
      if (!done.message.empty()) audit_record["message"] = done.message;
      audit_log->record("task", std::move(audit_record));
    }
    if (auto w = worker.lock())
      w->post([session, fair, ticket, seq, done = std::move(done)]() mutable {
        // The lane is free whether or not its client is still there.
        if (auto share = fair.lock()) share->finished(ticket, done.seconds);
        if (auto self = session.lock()) self->run_finished(seq, std::move(done));
      });
  });
  return true;
}

void Session::run_finished(std::uint64_t seq, protocol::Done done) {
  auto it = runs_.find(seq);
  // Gone: already answered with shutting_down, or the client left.
  if (it == runs_.end()) return;
  if (done.status != Status::ok) {
    for (std::uint64_t id : it->second.written)
      if (auto r = replicas_.find(id); r != replicas_.end())
        r->second->spoiled = fmt::format("buffer {} was written by a task that failed: {}", id, done.message);
    log().info("client {}: run {} failed: {}", describe(), done.request, printable(done.message, 1024));
    server_.gpu_health->check();  // it may have taken its GPU down with it
  } else {
    // A task that ran read nothing spoiled (the runtime skips those), so what
    // it wrote is good again: a writer after a failed task repairs the data.
    for (std::uint64_t id : it->second.written)
      if (auto r = replicas_.find(id); r != replicas_.end()) r->second->spoiled.clear();
  }
  server_.metrics.task_done(it->second.kernel, share_key_, done.seconds, done.status == Status::ok);
  runs_.erase(it);
  ++counters_.tasks;
  // More of this client's runs are here (a forwarded chain): their replies
  // come microseconds apart, and this one may wait a moment to leave with
  // them, one system call and one wake-up of the client for many.
  if (runs_.empty() || state_ == State::closed) return send(done);
  connection_->send_soon(protocol::encode(done));
}

}  // namespace ferry::ferryd
