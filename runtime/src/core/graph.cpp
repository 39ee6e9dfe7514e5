#include "ferry/runtime/graph.hpp"

#include "core/core.hpp"

namespace ferry {

Graph::Graph(Runtime& runtime) : runtime_(&runtime) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::add_prepared(const KernelRef& kernel, detail::Submission submission) {
  if (!kernel.def) throw UsageError("Graph::add: the KernelRef is empty");
  tasks_.push_back(std::make_unique<detail::PreparedTask>(runtime_->core_->prepare(kernel.def, std::move(submission))));
}

std::vector<Task> Graph::run() {
  std::vector<Task> handles;
  handles.reserve(tasks_.size());
  for (const auto& task : tasks_) handles.push_back(runtime_->core_->submit(*task));
  return handles;
}

void Graph::run_and_wait() {
  std::exception_ptr first;
  for (const Task& task : run()) {
    try {
      task.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::size_t Graph::size() const noexcept { return tasks_.size(); }

}  // namespace ferry
