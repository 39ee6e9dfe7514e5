// Compiling CUDA source when a kernel is defined: on a thread of its own,
// waited for at most a time limit, counted against the client that asked.
// NVRTC runs in the CUDA module; this part links no CUDA library.
#include <fmt/format.h>

#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "cuda_port/cuda_module.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/cuda_source.hpp"

namespace ferry {

struct CompileBudget::Count {
  std::mutex mutex;
  unsigned running = 0;
};

CompileBudget::CompileBudget(std::chrono::milliseconds limit, unsigned most)
    : limit_(limit), most_(most), count_(std::make_shared<Count>()) {
  if (limit <= std::chrono::milliseconds::zero()) throw UsageError("CompileBudget: the time limit must be above 0");
  if (most == 0) throw UsageError("CompileBudget: at least one compile must be allowed to run");
}

unsigned CompileBudget::running() const {
  std::lock_guard lock(count_->mutex);
  return count_->running;
}

void CompileBudget::run(std::string_view kernel, std::function<void()> work) {
  {
    std::lock_guard lock(count_->mutex);
    if (count_->running >= most_)
      throw UsageError(fmt::format(
          "cuda_kernel '{}': {} earlier compiles of this client are still running (NVRTC cannot be stopped when one "
          "overruns its {:g} s limit); define it again once they finish",
          kernel, count_->running, std::chrono::duration<double>(limit_).count()));
    ++count_->running;
  }
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  try {
    // Detached: a compile that overruns is not waited for (see the header).
    // It holds the count and the promise, so it may outlive this budget.
    std::thread([count = count_, work = std::move(work), done] {
      std::exception_ptr error;
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
      {
        // Uncounted before the answer, so a caller that got it may start the next at once.
        std::lock_guard lock(count->mutex);
        --count->running;
      }
      if (error) done->set_exception(error);
      else done->set_value();
    }).detach();
  } catch (...) {
    std::lock_guard lock(count_->mutex);
    --count_->running;
    throw;
  }
  if (finished.wait_for(limit_) == std::future_status::timeout)
    throw CompileError(fmt::format("cuda_kernel '{}': NVRTC did not finish compiling it within the {:g} s limit for "
                                   "compiling a kernel at its definition; make the source lighter (less unrolling, "
                                   "shallower template recursion) or raise the limit",
                                   kernel, std::chrono::duration<double>(limit_).count()),
                       {});
  finished.get();  // rethrows what the compile threw
}

void compile_cuda_source(const CudaSource& source, const std::vector<int>& gpus, CompileBudget& budget) {
  if (gpus.empty()) return;
  const detail::CudaModule* module = detail::cuda_module();
  if (module == nullptr)
    throw Error(fmt::format("cuda_kernel '{}': there is no CUDA module to compile it with NVRTC", source.entry));
  // Copies: the thread may run on after this call returns (an overrun).
  budget.run(source.entry, [module, source = std::make_shared<const CudaSource>(source), gpus] {
    for (int gpu : gpus) module->compile_nvrtc(*source, gpu);
  });
}

}  // namespace ferry
