#include "devices/cuda/cuda_device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "devices/cuda/gpu_probe.hpp"
#include "base/transfer_label.hpp"
#include "devices/device_host.hpp"
#include "devices/run_record.hpp"
#include "cuda/handles.hpp"  // kernels/cuda: the built-ins' library handles
#include "data/cuda_unified.hpp"
#include "data/dependencies.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"
#include "data/task_record.hpp"

namespace ferry::detail {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, what, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return value;
}

// FP32 lanes per multiprocessor by architecture; a seed for the
// performance models only, which measured runs replace.
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 6) return minor == 0 ? 64 : 128;
  if (major == 7) return 64;
  if (major == 8) return minor == 0 ? 64 : 128;
  return 128;
}

DevicePeak peak_of(int ordinal) {
  DevicePeak peak;
  const double sms = attribute(cudaDevAttrMultiProcessorCount, ordinal);
  const double clock_hz = attribute(cudaDevAttrClockRate, ordinal) * 1e3;
  const double memory_hz = attribute(cudaDevAttrMemoryClockRate, ordinal) * 1e3;
  const double bus_bytes = attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal) / 8.0;
  const int lanes = fp32_lanes_per_sm(attribute(cudaDevAttrComputeCapabilityMajor, ordinal),
                                      attribute(cudaDevAttrComputeCapabilityMinor, ordinal));
  peak.flops_per_second = sms * clock_hz > 0 ? 2.0 * lanes * sms * clock_hz : 10e12;
  peak.bytes_per_second = memory_hz * bus_bytes > 0 ? 2.0 * memory_hz * bus_bytes : 500e9;  // double data rate
  peak.launch_seconds = 5e-6;
  return peak;
}

// Per GPU model: two GPUs of one model share what was learned about it.
std::string perf_key_of(int ordinal) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("cuda:{}", ordinal);
  }
  return fmt::format("cuda:{}", prop.name);
}

// What replicas may take when not told: the memory free now, less a margin
// for other processes, CUDA libraries' workspaces and the unified pool.
std::size_t default_limit(const cuda::DeviceInfo& info) {
  const std::size_t margin = std::max<std::size_t>(std::size_t{512} << 20, info.total_bytes / 10);
  return info.free_bytes > 2 * margin ? info.free_bytes - margin : info.free_bytes / 2;
}

// Errors after which the context is unusable: every later call fails too.
bool sticky(cudaError_t status) {
  cudaGetLastError();  // clears a non-sticky one
  return cudaDeviceSynchronize() != cudaSuccess && status != cudaSuccess;
}

}  // namespace

std::string CudaDevice::cuda_text(cudaError_t status) {
  return fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}

CudaDevice::CudaDevice(DeviceHost& runtime, DeviceId id, MemoryNodeId node, CudaDeviceOptions options)
    : OffloadDevice(runtime, id, fmt::format("cuda:{}", options.ordinal), DeviceKind::cuda, node,
                    perf_key_of(options.ordinal), gpu_probe(options.ordinal, peak_of(options.ordinal)),
                    DeviceHealth::Keep::first, /*up=*/true),
      options_(options) {
  const CurrentDevice current(options_.ordinal);
  const cuda::DeviceInfo info = cuda::device_info(options_.ordinal);
  model_ = info.name;
  DevicePool::Options pool;
  pool.device = options_.ordinal;
  pool.max_fraction = 1.0;
  pool.max_bytes = options_.memory_limit != 0 ? options_.memory_limit : default_limit(info);
  pool_ = std::make_unique<DevicePool>(pool);
  // Called by the pool when an allocation would pass its bound, or the GPU
  // itself is out of memory: least recently used copies make room.
  pool_->set_reclaim_handler([this](std::size_t needed) { return evict(needed); });
  copier_ = std::make_unique<CudaCopier>(options_.ordinal, options_.chunk_bytes, options_.slots);
  for (unsigned i = 0; i < std::max(1u, options_.streams); ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->index = i;
  }
  if (Trace* trace = runtime.trace())
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      lanes_[i]->trace_lane = trace->lane(fmt::format("{} stream {}", name(), i), name());
  open_link_lanes();
  measure_link();
  executor_ = std::thread([this] { executor_loop(); });
  for (int i = 0; i < prefetch_threads; ++i) prefetchers_.emplace_back([this] { prefetch_loop(); });
  for (auto& lane : lanes_) lane->completer = std::thread([this, l = lane.get()] { completer_loop(*l); });
  log().info("{}: {} ({}), {} for replicas, {} compute streams", name(), model_, format_bytes(info.total_bytes),
             format_bytes(pool_->stats().bound_bytes), lanes_.size());
}

CudaDevice::~CudaDevice() {
  drain();
  // Bring home what only this GPU holds: buffers may outlive the runtime.
  bring_home("at shutdown");
  {
    std::lock_guard lock(queue_mutex_);
    stopping_.store(true);
  }
  queue_cv_.notify_all();
  prefetch_cv_.notify_all();
  for (auto& lane : lanes_) {
    {
      std::lock_guard lock(lane->mutex);
    }
    lane->cv.notify_all();
  }
  if (executor_.joinable()) executor_.join();
  for (auto& prefetcher : prefetchers_)
    if (prefetcher.joinable()) prefetcher.join();
  for (auto& lane : lanes_)
    if (lane->completer.joinable()) lane->completer.join();
  // Copies forget_node let go of without dropping (it only forgets them).
  std::unordered_map<std::uint64_t, Block> blocks;
  {
    std::lock_guard lock(blocks_mutex_);
    blocks.swap(blocks_);
  }
  try {
    const CurrentDevice current(options_.ordinal);
    for (auto& [id, block] : blocks) pool_->deallocate(block.ptr, block.bytes, StreamRef{copier_->h2d()});
    cudaStreamSynchronize(copier_->h2d());
    // Streams, events and the pool go while this GPU is current; first the
    // cuBLAS/cuSOLVER handles made for each compute stream (they hold workspace).
    for (auto& lane : lanes_) {
      cudaStreamSynchronize(lane->stream.get());
      kernels::cuda::release_handles(options_.ordinal, lane->stream.get());
    }
    spare_events_.clear();
    lanes_.clear();
    copier_.reset();
    pool_.reset();
  } catch (const std::exception& e) {
    log().error("{}: freeing replicas at shutdown failed: {}", name(), e.what());
  }
}

std::string CudaDevice::describe() const {
  const auto s = pool_->stats();
  return fmt::format("{} ({}, {} streams, {} of {} for replicas in use{})", name(), model_, lanes_.size(),
                     format_bytes(s.bytes_in_use), format_bytes(s.bound_bytes), alive() ? "" : ", failed");
}

// ---- tasks ----

void CudaDevice::enqueue(TaskRecord* task) {
  work().started();
  {
    std::lock_guard lock(queue_mutex_);
    ready_.push_back(task);
  }
  queue_cv_.notify_one();
}

void CudaDevice::prefetch(TaskRecord* task) {
  if (!alive()) return;
  Prefetch job;
  if (!take_prefetch(task, job)) return;
  bool wake = false;
  {
    std::lock_guard lock(queue_mutex_);
    prefetches_.push_back(std::move(job));
    // A busy prefetcher takes the next job when it is done, so its sibling
    // is woken only for a second job waiting (worth a second ship in flight):
    // woken for every task, a chain's submit measured 4.3-4.9 µs per task on
    // an H200 host, against 1.7 with one prefetcher (a wake-up is a system
    // call on the submitting thread).
    wake = prefetching_ == 0 || prefetches_.size() > 1;
  }
  if (wake) prefetch_cv_.notify_one();
}

void CudaDevice::lost(const std::string& reason) {
  if (health().lost(reason))
    log().error("{} is unusable after a CUDA error ({}); its tasks run on the CPU from now on, and data only it held "
                "is lost",
                name(), reason);
}

void CudaDevice::executor_loop() {
  try {
    check_cuda(cudaSetDevice(options_.ordinal), "cudaSetDevice");
  } catch (const std::exception& e) {
    lost(e.what());
  }
  IdleTrim idle(options_.idle_trim_after);
  for (;;) {
    TaskRecord* task = nullptr;
    {
      std::unique_lock lock(queue_mutex_);
      while (!stopping_.load() && ready_.empty()) {
        const auto now = IdleTrim::Clock::now();
        if (idle.due(now)) {
          lock.unlock();
          give_back_reserve("idle");
          idle.trimmed();
          lock.lock();
          continue;
        }
        const auto wait = idle.wait(now);
        if (wait == IdleTrim::Clock::duration::max()) queue_cv_.wait(lock);
        else queue_cv_.wait_for(lock, wait);
      }
      if (ready_.empty()) return;
      task = ready_.front();
      ready_.pop_front();
    }
    idle.used(IdleTrim::Clock::now());
    launch(task);
  }
}

std::size_t CudaDevice::give_back_reserve(const char* why) noexcept {
  if (!alive()) return 0;
  try {
    const CurrentDevice current(options_.ordinal);
    // A free is stream-ordered: until its stream reaches it, the block counts
    // as in use and cudaMemPoolTrimTo keeps it reserved. Replicas are freed
    // on the host-to-device stream, behind work on the compute streams it
    // waits for, so all of them are waited for first.
    check_cuda(cudaStreamSynchronize(copier_->h2d()), "cudaStreamSynchronize (before a trim)");
    for (const auto& lane : lanes_)
      check_cuda(cudaStreamSynchronize(lane->stream.get()), "cudaStreamSynchronize (before a trim)");
    const std::size_t before = pool_->reserved_bytes();
    pool_->trim();
    const std::size_t after = pool_->reserved_bytes();
    const std::size_t returned = before > after ? before - after : 0;
    if (returned > 0) log().debug("{}: gave {} of reserved memory back to the GPU ({})", name(), format_bytes(returned), why);
    return returned;
  } catch (const std::exception& e) {
    log().debug("{}: could not trim its memory pool ({}): {}", name(), why, e.what());
    cudaGetLastError();
    return 0;
  }
}

void CudaDevice::prefetch_loop() {
  try {
    check_cuda(cudaSetDevice(options_.ordinal), "cudaSetDevice");
  } catch (const std::exception& e) {
    lost(e.what());
  }
  for (;;) {
    Prefetch job;
    {
      std::unique_lock lock(queue_mutex_);
      prefetch_cv_.wait(lock, [&] { return stopping_.load() || !prefetches_.empty(); });
      if (prefetches_.empty()) return;
      job = std::move(prefetches_.front());
      prefetches_.pop_front();
      ++prefetching_;
    }
    run_prefetch(job);
    finish_prefetch(job);
    std::lock_guard lock(queue_mutex_);
    --prefetching_;
  }
}

bool CudaDevice::room_for_prefetch(const BufferState& view) const {
  const auto stats = pool_->stats();
  return stats.bytes_in_use + host_region(view).bytes() <= stats.bound_bytes;
}

void CudaDevice::restore_host_args(TaskRecord* task) {
  for (std::size_t i = 0; i < task->buffers.size(); ++i) {
    BufferArg& arg = task->buffer_arg(i);
    arg.data = nullptr;
    arg.ld = task->buffers[i]->ld();
  }
}

void CudaDevice::unpin(TaskRecord* task, const std::vector<std::uint64_t>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != 0) release_on_node(*task->buffers[i], *this, ids[i]);
}

void CudaDevice::finish_unlaunched(TaskRecord* task, const std::vector<std::uint64_t>& ids) {
  unpin(task, ids);
  wait_for_order(task);
  const std::int64_t now = now_ns();
  task->start_ns = task->end_ns = now;
  runtime().finish(task, nullptr);
  work().finished();
}

void CudaDevice::hand_back(TaskRecord* task, const std::function<std::string()>& failure) {
  wait_for_order(task);
  if (fall_back(task, failure)) work().finished();
  else finish_unlaunched(task, {});
}

bool CudaDevice::stage_buffers(TaskRecord* task, InFlight& flight, Lane& lane) {
  const TaskLabelScope transfers_for(task->name);
  std::size_t i = 0;
  try {
    for (; i < task->buffers.size(); ++i) {
      const BufferState& view = *task->buffers[i];
      BufferArg& arg = task->buffer_arg(i);
      if (view.root->unified) {
        // In place: remote copies settle as for host use, then the pages
        // move here on this task's stream, ahead of its kernel.
        acquire_unified(view, arg.mode);
        unified_to_device(*view.root, view.region, options_.ordinal, lane.stream.get());
        arg.data = view.host_data();
        arg.ld = view.ld();
      } else {
        flight.ids[i] = acquire_on_node(view, arg.mode, *this);
        arg.data = pointer(flight.ids[i]);
        arg.ld = arg.cols;  // copies here are packed
      }
    }
    return true;
  } catch (const OutOfMemory& e) {
    unpin(task, flight.ids);
    restore_host_args(task);
    if (task->kernel->cpu)
      log().warn("{}: its data does not fit on {} ({}); running it on the CPU", task->label(), name(), e.what());
    hand_back(task, [&] {
      return fmt::format("{}: its data does not fit on {}, and the kernel has no CPU implementation: {}",
                         task->label(), name(), e.what());
    });
    return false;
  } catch (const std::exception& e) {
    unpin(task, flight.ids);
    restore_host_args(task);
    task->error = std::make_exception_ptr(KernelError(fmt::format(
        "{}: buffer '{}' could not be moved to {}: {}", task->label(), task->buffers[i]->name, name(), e.what())));
  }
  finish_unlaunched(task, {});
  return false;
}

void CudaDevice::wait_for_order(TaskRecord* task) noexcept {
  if (TaskRecord* before = task->ordered_after.exchange(nullptr, std::memory_order_acq_rel)) {
    before->done.wait(false, std::memory_order_acquire);
    release(before);
  }
}

std::unique_ptr<Event> CudaDevice::take_event() {
  {
    std::lock_guard lock(events_mutex_);
    if (!spare_events_.empty()) {
      auto event = std::move(spare_events_.back());
      spare_events_.pop_back();
      return event;
    }
  }
  return std::make_unique<Event>(/*timing=*/true);
}

void CudaDevice::return_events(InFlight& flight) noexcept {
  // Only events known to be complete: one whose record failed may still be pending.
  constexpr std::size_t keep = 64;
  std::lock_guard lock(events_mutex_);
  for (auto* event : {&flight.start, &flight.end})
    if (*event && spare_events_.size() < keep) spare_events_.push_back(std::move(*event));
}

CudaDevice::Lane& CudaDevice::lane_for(TaskRecord* task) {
  if (task->ordered_lane >= 0 && static_cast<std::size_t>(task->ordered_lane) < lanes_.size())
    return *lanes_[static_cast<std::size_t>(task->ordered_lane)];
  return *lanes_[next_lane_++ % lanes_.size()];
}

void CudaDevice::release_ordered(TaskRecord* task, const Lane& lane) {
  std::vector<TaskRecord*> released;
  {
    std::lock_guard lock(task->mutex);
    // From now on a successor submitted behind it follows it here (add_edge).
    task->launched_lane = static_cast<int>(lane.index);
    for (auto& edge : task->successors) {
      if (edge.ordered || !follow_on_stream(task, edge.task)) continue;
      edge.ordered = true;
      if (edge.task->predecessor_finished()) released.push_back(edge.task);
    }
  }
  for (TaskRecord* next : released) {
    now_ready(next->estimate_ns);
    next->counted_ready = true;
    enqueue(next);
  }
}

void CudaDevice::launch(TaskRecord* task) {
  if (!alive()) {
    hand_back(task, [&] {
      return fmt::format("{} cannot run: {} failed earlier and the kernel has no CPU implementation", task->label(),
                         name());
    });
    return;
  }
  Lane& lane = lane_for(task);
  if (const TaskRecord* before = task->ordered_after.load(std::memory_order_acquire);
      before != nullptr && !before->done.load(std::memory_order_acquire))
    stream_ordered_.fetch_add(1, std::memory_order_relaxed);
  InFlight flight;
  flight.task = task;
  flight.ids.assign(task->buffers.size(), 0);
  try {
    flight.start = take_event();
    flight.end = take_event();
  } catch (const std::exception& e) {
    task->error = std::make_exception_ptr(
        KernelError(fmt::format("{} could not start on {}: {}", task->label(), name(), e.what())));
    finish_unlaunched(task, {});
    return;
  }
  if (!stage_buffers(task, flight, lane)) return;

  const auto failed = [&](const std::string& what) {
    task->error = std::make_exception_ptr(KernelError(fmt::format("{} failed on {}: {}", task->label(), name(), what)));
  };
  ExecContext context{task->args, task->name, -1, lane.stream.get(), options_.ordinal, std::nullopt, pool_.get()};
  flight.launched_ns = now_ns();
  // The variants check each launch by its own status (cudaLaunchKernel's
  // return, a library's status); the thread's last-error slot is only a net
  // for one that did not, so it is emptied first: what an earlier call left
  // there is not this task's doing.
  if (const cudaError_t stale = cudaGetLastError(); stale != cudaSuccess)
    log().warn("{}: an earlier CUDA call left an error unchecked ({}); not charged to task '{}'", name(),
               cuda_text(stale), task->name);
  try {
    flight.start->record(lane.stream.get());
    task->kernel->cuda(context);
    const cudaError_t unchecked = cudaGetLastError();
    if (unchecked != cudaSuccess)
      throw CudaError("the kernel left a CUDA error unchecked: " + cuda_text(unchecked), unchecked);
    task->result = context.result;
  } catch (const OutOfMemory& e) {
    // The variant ran out of memory: a library's workspace or handle, or
    // scratch with the GPU full under another allocator of this process.
    // What the pool keeps in reserve goes back, so the next try may fit.
    const std::size_t returned = give_back_reserve("an allocation outside the pool failed");
    failed(fmt::format("{} ({} of reserved memory given back to the GPU since)", e.what(), format_bytes(returned)));
  } catch (const std::exception& e) {
    failed(e.what());
  } catch (...) {
    failed("unknown exception");
  }
  // Recorded after a failure too: whatever the variant did enqueue must be
  // done before the task's memory is unpinned and perhaps reused.
  const cudaError_t recorded = cudaEventRecord(flight.end->get(), lane.stream.get());
  if (recorded != cudaSuccess) {
    if (!task->error) failed("cudaEventRecord: " + cuda_text(recorded));
    const cudaError_t synced = cudaStreamSynchronize(lane.stream.get());
    if (sticky(synced)) lost(cuda_text(synced));
    flight.end.reset();
  }
  const bool enqueued = flight.end != nullptr && !task->error;
  {
    std::lock_guard lock(lane.mutex);
    lane.waiting.push_back(std::move(flight));
  }
  lane.cv.notify_one();
  if (enqueued) release_ordered(task, lane);
}

void CudaDevice::completer_loop(Lane& lane) {
  try {
    check_cuda(cudaSetDevice(options_.ordinal), "cudaSetDevice");
  } catch (const std::exception& e) {
    lost(e.what());
  }
  for (;;) {
    InFlight flight;
    {
      std::unique_lock lock(lane.mutex);
      lane.cv.wait(lock, [&] { return stopping_.load() || !lane.waiting.empty(); });
      if (lane.waiting.empty()) return;
      flight = std::move(lane.waiting.front());
      lane.waiting.pop_front();
    }
    // The stream runs its tasks in order: waiting for this one's event
    // never holds up one that finished before it.
    const cudaError_t status = flight.end ? cudaEventSynchronize(flight.end->get()) : cudaSuccess;
    complete(flight, lane, status);
  }
}

void CudaDevice::settle_outputs(TaskRecord* task, const std::vector<std::uint64_t>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0 || !writes(task->buffer_arg(i).mode)) continue;
    // Resident: the host gets the data when someone there asks for it
    // (acquire_on_host). No lineage: a local GPU is not lost the way a
    // remote host is; after a fatal CUDA error its data is gone, and the
    // error says so.
    written_on_node(*task->buffers[i], *this, ids[i], nullptr);
  }
}

void CudaDevice::complete(InFlight& flight, Lane& lane, cudaError_t status) {
  TaskRecord* task = flight.task;
  double seconds = 0;
  if (status != cudaSuccess) {
    if (!task->error)
      task->error = std::make_exception_ptr(
          KernelError(fmt::format("{} failed on {}: {}", task->label(), name(), cuda_text(status))));
    if (sticky(status)) lost(cuda_text(status));
  } else if (flight.end) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, flight.start->get(), flight.end->get()) == cudaSuccess) seconds = ms * 1e-3;
    else cudaGetLastError();
    return_events(flight);
  }
  // Its predecessor on this stream completed first (the completer takes
  // them in order) and may have failed after this task was enqueued behind it.
  if (TaskRecord* before = task->ordered_after.exchange(nullptr, std::memory_order_acq_rel)) release(before);
  const bool spoiled = task->error || task->failed_input.load(std::memory_order_acquire) != nullptr;
  if (!spoiled) {
    try {
      settle_outputs(task, flight.ids);
    } catch (const std::exception& e) {
      task->error = std::make_exception_ptr(KernelError(
          fmt::format("{} ran on {}, but its outputs could not be kept: {}", task->label(), name(), e.what())));
    }
  }
  unpin(task, flight.ids);
  if (spoiled || task->error) {
    // A half-written copy must not pass for the host's data later.
    for (std::size_t i = 0; i < flight.ids.size(); ++i)
      if (flight.ids[i] != 0 && writes(task->buffer_arg(i).mode))
        discard_on_node(*task->buffers[i], *this, flight.ids[i]);
  }
  const std::int64_t end_ns = now_ns();
  // Timed by the stream's events where they could be read; else from its launch.
  record_run(runtime(), *this, *task,
             {.start_ns = seconds > 0 ? end_ns - static_cast<std::int64_t>(seconds * 1e9) : flight.launched_ns,
              .end_ns = end_ns,
              .cost_seconds = seconds > 0 ? std::optional<double>(seconds) : std::nullopt,
              .lane = lane.trace_lane,
              .trace_start_ns = std::nullopt});
  runtime().finish(task, nullptr);
  work().finished();
}

}  // namespace ferry::detail
