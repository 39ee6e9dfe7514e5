// Chains on one remote without the client in the loop. A task placed on a
// remote whose unfinished predecessors were all sent there already goes out
// at once, naming them (Run::after); ferryd's runtime orders it behind them
// by the same data dependencies the client inferred, since both see the
// accesses in the same order. Its reply is taken when the client's own
// dependency tracking makes it ready, so lineage, coherence and failure
// handling stay exactly those of a task run one round trip at a time.
//
// Forwarding needs nothing to move: every buffer the task uses must already
// be on the host as the one copy of exactly its region (a predecessor put it
// there). Otherwise the task waits until it is ready and runs as before.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <queue>

#include "devices/device_host.hpp"
#include "data/task_record.hpp"
#include "devices/remote/remote_device.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

namespace {

// Tasks held back at once, waiting for their predecessors to be sent. A
// send looks only at those held behind it, so this bounds memory, not work;
// it was 1024 when each send looked at them all, and a chain whose first
// task had to ship its data then ran every task past the 1024th one round
// trip at a time. Beyond it a task simply runs when ready.
constexpr std::size_t max_waiting = std::size_t{1} << 16;

}  // namespace

std::future<protocol::Message> RemoteDevice::send_run(TaskRecord* task, const protocol::Run& run) {
  std::lock_guard order(forward_order_mutex_);
  std::lock_guard lock(forward_mutex_);
  sent_[task->id] = Sent{run.request, epoch()};
  auto reply = requests_.request_run(run);
  // Its successors held back may follow it now.
  if (!held_behind_.empty()) forward_held(task->id);
  return reply;
}

void RemoteDevice::sent_done(TaskRecord* task) {
  std::lock_guard lock(forward_mutex_);
  sent_.erase(task->id);
}

bool RemoteDevice::forward_or_hold(TaskRecord* task) {
  if (task->kernel->cuda_source) return false;  // its definition travels with its first run
  checkpoint_before_forwarding(task);
  std::lock_guard order(forward_order_mutex_);
  if (try_forward(task, false)) return true;
  std::lock_guard lock(forward_mutex_);
  if (waiting_.size() < max_waiting)
    if (const auto behind = unsent_predecessor(task)) hold(task, *behind);
  return false;
}

std::optional<std::uint64_t> RemoteDevice::unsent_predecessor(const TaskRecord* task) const {
  const std::uint64_t now = epoch();
  for (std::uint64_t id : task->waits_on) {
    const auto it = sent_.find(id);
    if (it == sent_.end()) return id;  // not sent yet (or finished already: the task is then ready soon)
    if (it->second.epoch != now) return std::nullopt;
  }
  return std::nullopt;
}

void RemoteDevice::hold(TaskRecord* task, std::uint64_t behind) {
  if (waiting_.emplace(task->id, task).second) retain(task);
  held_under_[task->id] = behind;
  held_behind_[behind].push_back(task->id);
}

void RemoteDevice::unhold(std::uint64_t id) {
  const auto it = waiting_.find(id);
  if (it == waiting_.end()) return;
  release(it->second);
  waiting_.erase(it);
  const auto under = held_under_.find(id);
  if (under == held_under_.end()) return;
  if (auto list = held_behind_.find(under->second); list != held_behind_.end()) {
    std::erase(list->second, id);
    if (list->second.empty()) held_behind_.erase(list);
  }
  held_under_.erase(under);
}

// A chain whose copy is due for a checkpoint (lineage_limit writes since
// its data was home) is not sent on past it: the checkpoint's fetch must see
// every earlier write and none of the later ones. Rather than hold the rest
// of the chain back until this task is ready (tasks beyond max_waiting
// would then each pay a round trip), the submitting thread waits here for
// the task's predecessors, all sent to this host, then brings the copy home
// and the chain goes on being forwarded. One wait for the writes in flight
// and a fetch per lineage_limit writes: the backpressure that bounds the
// lineage, and the tasks in flight with it. Nothing is waited for when a
// predecessor was not sent here: the task then runs when ready, and
// run_here checkpoints.
void RemoteDevice::checkpoint_before_forwarding(TaskRecord* task) {
  if (!alive() || task->failed_input.load(std::memory_order_acquire) != nullptr) return;
  bool due = false;
  for (std::size_t i = 0; i < task->buffers.size() && !due; ++i)
    due = writes(task->buffer_arg(i).mode) && checkpoint_due(*task->buffers[i], *this);
  if (!due) return;
  {
    std::lock_guard lock(forward_mutex_);
    const std::uint64_t now = epoch();
    for (std::uint64_t id : task->waits_on)
      if (auto it = sent_.find(id); it == sent_.end() || it->second.epoch != now) return;
  }
  runtime().push_held();  // the predecessors' forwards may be gathered still
  // Its launch holds one count of `pending` until it returns; the rest are
  // unfinished predecessors, finished by proxies and waiters, not by this
  // thread. Blocked on, not spun: they may take as long as their kernels.
  // Woken when the last one finishes (TaskRecord::predecessor_finished):
  // sleeping 20 µs doubling to 2 ms, as it did, could oversleep by the
  // last pause, the client and ferryd both idle meanwhile.
  for (int left = task->pending.load(std::memory_order_acquire); left > 1;
       left = task->pending.load(std::memory_order_acquire))
    task->pending.wait(left, std::memory_order_acquire);
  try {
    checkpoint_writes(task);
  } catch (const std::exception& e) {
    // Still due: the task is not forwarded, and run_here tries again.
    log().debug("{}: checkpoint on {} failed: {}", task->label(), name(), e.what());
  }
}

void RemoteDevice::checkpoint_writes(TaskRecord* task) {
  for (std::size_t i = 0; i < task->buffers.size(); ++i)
    if (writes(task->buffer_arg(i).mode) && checkpoint_on_node(*task->buffers[i], *this))
      checkpoints_.fetch_add(1, std::memory_order_relaxed);
}

bool RemoteDevice::in_place(const BufferState& view, AccessMode mode) const {
  BufferRoot& root = *view.root;
  if (root.unified) return false;
  const std::uint64_t now = epoch();
  std::lock_guard lock(root.transfer_mutex);
  // Overwriting an input some copy's lineage read in a version only a node
  // held first brings that copy home, which must not happen while later runs
  // may still be writing it there. A host version needs nothing: the host's
  // bytes stay as they are (coherence.hpp, data versions).
  if (writes(mode) && root.has_lineage_readers.load(std::memory_order_acquire))
    for (const auto& reader : root.lineage_readers)
      if (!reader.host_version && reader.read.overlaps(view.region))
        if (const auto copy = reader.copy.lock(); copy && copy->modified) return false;
  bool found = false;
  for (const auto& copy : root.copies) {
    if (!copy->region.overlaps(view.region)) continue;
    if (copy->link != static_cast<const NodeLink*>(this) || !(copy->region == view.region) || copy->epoch != now)
      return false;
    // Due for a checkpoint, which waits for the runs writing it: this one
    // goes when it is ready (run_here brings the data home first).
    if (writes(mode) && copy->checkpoint_due()) return false;
    found = true;
  }
  return found;
}

bool RemoteDevice::try_forward(TaskRecord* task, bool map_held) {
  if (!alive() || task->kernel->cuda_source || task->failed_input.load(std::memory_order_acquire) != nullptr)
    return false;
  // The maps are locked only to read and record: a proxy settling earlier
  // runs takes that lock for each of them, and used to wait out each
  // forward's marshalling and send.
  const auto maps = [&] { return map_held ? std::unique_lock<std::mutex>() : std::unique_lock(forward_mutex_); };
  const std::uint64_t now = epoch();
  Marshalled& m = forward_marshalled_;  // ours under the order lock
  std::vector<std::uint64_t>& after = m.run.after;
  after.clear();
  {
    auto lock = maps();
    for (std::uint64_t id : task->waits_on) {
      auto it = sent_.find(id);
      if (it == sent_.end() || it->second.epoch != now) return false;  // not sent here (yet), or to a lost session
      after.push_back(it->second.request);
    }
  }
  std::sort(after.begin(), after.end());
  after.erase(std::unique(after.begin(), after.end()), after.end());
  if (after.size() > protocol::max_after) return false;

  // Made here, freed by the proxy that settles it: from the records' pool.
  auto forwarded = std::allocate_shared<Forwarded>(RecordAllocator<Forwarded>{});
  {
    std::lock_guard task_lock(task->mutex);
    if (task->closed) return false;
    forwarded->views = task->buffers;  // finish() drops the task's own list
  }
  for (std::size_t i = 0; i < forwarded->views.size(); ++i)
    if (!in_place(*forwarded->views[i], task->buffer_arg(i).mode)) return false;
  {
    // A task whose input failed finishes without running and is never
    // claimed: this continuation then releases what its forwarded run pins.
    std::lock_guard task_lock(task->mutex);
    if (task->closed) return false;
    task->continuations.push_back([this, id = task->id](const Task&) { forget_forwarded(id); });
  }

  try {
    marshal(task, forwarded->views, *this, requests_.next_id(), m);  // `after` stays
    forwarded->start = std::chrono::steady_clock::now();
    forwarded->start_ns = runtime().trace() ? runtime().trace()->now_ns() : 0;
    {
      auto lock = maps();
      sent_[task->id] = Sent{m.run.request, now};
    }
    // It waits there for runs sent before it: it may wait a moment here to
    // leave with the runs submitted after it, one system call for many.
    const bool soon = !m.run.after.empty();
    forwarded->reply = requests_.request_run(m.run, soon);
    forwarded->ids = std::move(m.ids);
  } catch (const std::exception& e) {
    {
      auto lock = maps();
      sent_.erase(task->id);
    }
    unpin(forwarded->views, m.ids, *this);
    log().debug("{} not forwarded to {}: {}", task->label(), name(), e.what());
    return false;
  }
  auto lock = maps();
  forwarded_.emplace(task->id, std::move(forwarded));
  forwarded_count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void RemoteDevice::forward_held(std::uint64_t sent) {
  // Smallest id first: forwards leave in submission order, which is the
  // order ferryd infers their dependencies in.
  std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> candidates;
  const auto behind = [&](std::uint64_t id) {
    const auto list = held_behind_.find(id);
    if (list == held_behind_.end()) return;
    for (std::uint64_t held : list->second) {
      candidates.push(held);
      held_under_.erase(held);
    }
    held_behind_.erase(list);
  };
  behind(sent);
  while (!candidates.empty()) {
    const std::uint64_t id = candidates.top();
    candidates.pop();
    const auto it = waiting_.find(id);
    if (it == waiting_.end()) continue;  // claimed meanwhile
    TaskRecord* task = it->second;
    const bool gone = task->done.load(std::memory_order_acquire) ||
                      task->failed_input.load(std::memory_order_acquire) != nullptr;
    if (!gone && try_forward(task, true)) {
      unhold(id);
      behind(id);  // its own successors held behind it may follow in this pass
    } else if (const auto next = gone ? std::nullopt : unsent_predecessor(task)) {
      held_under_[id] = *next;
      held_behind_[*next].push_back(id);
    } else {
      // Every predecessor sent, and still it cannot go (a copy not in place,
      // one due for a checkpoint): it runs when ready.
      unhold(id);
    }
  }
}

std::shared_ptr<RemoteDevice::Forwarded> RemoteDevice::claim(TaskRecord* task) {
  std::lock_guard lock(forward_mutex_);
  unhold(task->id);
  auto it = forwarded_.find(task->id);
  if (it == forwarded_.end()) return nullptr;
  auto forwarded = std::move(it->second);
  forwarded_.erase(it);
  return forwarded;
}

bool RemoteDevice::finish_forwarded(TaskRecord* task, Forwarded& forwarded, unsigned slot) {
  protocol::Message reply;
  try {
    reply = requests_.await(forwarded.reply, "run");
  } catch (const RemoteError& e) {
    sent_done(task);
    unpin(forwarded.views, forwarded.ids, *this);
    log().debug("{}: its forwarded run was lost ({}); running it again", task->label(), e.what());
    return false;
  }
  sent_done(task);
  const auto* done = std::get_if<protocol::Done>(&reply);
  if (done == nullptr || (done->status != protocol::Status::ok && done->status != protocol::Status::kernel_failed)) {
    // Refused there (e.g. behind a refused predecessor): nothing ran, so it
    // runs again the ordinary way, from wherever its inputs now are.
    unpin(forwarded.views, forwarded.ids, *this);
    log().debug("{}: its forwarded run was refused ({}); running it again", task->label(),
                done ? done->message : "no run reply");
    return false;
  }
  settle(task, *done, forwarded.ids);
  // Its round trip overlapped its predecessors': the kernel's time on the
  // host is what it cost there (the link's latency is weighed apart, as
  // DeviceSnapshot::round_trip).
  std::optional<double> cost;
  if (done->status == protocol::Status::ok) cost = done->seconds;
  unpin(forwarded.views, forwarded.ids, *this);
  report_run(task, slot, forwarded.start, forwarded.start_ns, cost);
  return true;
}

void RemoteDevice::forget_forwarded(std::uint64_t task_id) {
  std::shared_ptr<Forwarded> forwarded;
  {
    std::lock_guard lock(forward_mutex_);
    sent_.erase(task_id);
    auto it = forwarded_.find(task_id);
    if (it == forwarded_.end()) return;  // claimed: its run settled it
    forwarded = std::move(it->second);
    forwarded_.erase(it);
  }
  unpin(forwarded->views, forwarded->ids, *this);
}

}  // namespace ferry::detail
