#include "devices/cpu/cpu_device.hpp"
#include "devices/cpu/cpu_probe.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <thread>

#include "devices/device_host.hpp"
#include "data/task_record.hpp"
#include "base/tsan.hpp"

namespace ferry::detail {

namespace {

}  // namespace

CpuDevice::CpuDevice(DeviceHost& runtime, DeviceId id, unsigned workers)
    : Device(id, "cpu", DeviceKind::cpu, host_node, "cpu", cpu_probe()),
      runtime_(runtime),
      workers_(workers),
      // TBB keeps hardware_concurrency - 1 workers unless told otherwise; a
      // runtime asking for N workers must get N even while the submitting
      // thread is busy elsewhere.
      parallelism_(std::make_unique<tbb::global_control>(
          tbb::global_control::max_allowed_parallelism,
          std::max<std::size_t>(workers + 1, std::thread::hardware_concurrency()))),
      arena_(static_cast<int>(workers), /*reserved_for_masters=*/0) {
  // Tasks are the parallelism; a multi-threaded BLAS inside each would fight
  // the workers for the same cores.
  openblas_set_num_threads(1);
  if (Trace* trace = runtime_.trace()) {
    for (unsigned w = 0; w < workers_; ++w)
      lanes_.push_back(trace->lane(fmt::format("cpu worker {}", w), name()));
  }
}

CpuDevice::~CpuDevice() {
  drain();
  while (jobs_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void CpuDevice::enqueue(TaskRecord* task) {
  active_.fetch_add(1, std::memory_order_relaxed);
  tsan_release(task);
  ready_.push(task);
  if (drainers_.load(std::memory_order_seq_cst) < workers_) start_drainer();
}

void CpuDevice::start_drainer() {
  for (unsigned n = drainers_.load(std::memory_order_seq_cst); n < workers_;)
    if (drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst)) {
      jobs_.fetch_add(1, std::memory_order_relaxed);
      arena_.enqueue([this] {
        drain_ready();
        jobs_.fetch_sub(1, std::memory_order_release);  // the job's last touch of the device
      });
      return;
    }
}

void CpuDevice::drain_ready() {
  for (;;) {
    TaskRecord* task = nullptr;
    while (ready_.try_pop(task)) {
      tsan_acquire(task);
      run_chain(task);
    }
    drainers_.fetch_sub(1, std::memory_order_seq_cst);
    // A task pushed after the last pop saw this drainer still counted and
    // started none: take it up again (or leave it to a drainer that did).
    if (ready_.empty()) return;
    unsigned n = drainers_.load(std::memory_order_seq_cst);
    do {
      if (n >= workers_) return;
    } while (!drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst));
  }
}

void CpuDevice::run_chain(TaskRecord* task) {
  const int slot = tbb::this_task_arena::current_thread_index();
  const int lane = lanes_.empty() || slot < 0 ? slot : lanes_[static_cast<std::size_t>(slot) % lanes_.size()];
  // Run a released successor right here instead of queueing it: a chain of
  // dependent tasks then costs no hand-off between threads.
  while (task != nullptr) {
    runtime_.execute(task, *this, slot, lane);
    task = runtime_.finish(task, this);
  }
  if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) active_.notify_all();
}

void CpuDevice::drain() {
  for (std::size_t n = active_.load(std::memory_order_acquire); n != 0; n = active_.load(std::memory_order_acquire))
    active_.wait(n, std::memory_order_acquire);
}

}  // namespace ferry::detail
