// A task graph built once and run many times (iterative solvers, pipelines
// applied to fresh data). Arguments and kernels are checked when a task is
// added; each run() submits the same tasks through the ordinary path, so
// dependencies on work outside the graph are honoured too.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "ferry/runtime/runtime.hpp"

namespace ferry {

namespace detail {
struct PreparedTask;
}

class Graph {
 public:
  explicit Graph(Runtime& runtime);
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;

  template <typename... A>
  Graph& add(std::string_view kernel, A&&... args) {
    add_prepared(runtime_->find_kernel(kernel), detail::make_submission(std::forward<A>(args)...));
    return *this;
  }
  template <typename... A>
  Graph& add(const KernelRef& kernel, A&&... args) {
    add_prepared(kernel, detail::make_submission(std::forward<A>(args)...));
    return *this;
  }

  // Submits every task, in the order added; returns their handles.
  std::vector<Task> run();
  // run(), then wait for those tasks; rethrows the first failure.
  void run_and_wait();
  std::size_t size() const noexcept;

 private:
  void add_prepared(const KernelRef& kernel, detail::Submission submission);

  Runtime* runtime_;
  std::vector<std::unique_ptr<detail::PreparedTask>> tasks_;
};

}  // namespace ferry
