// The C++ side of ferry.Runtime and ferry.Kernel, shared by the runtime
// binding and the benchmark support.
#pragma once

#include <memory>
#include <vector>

#include "bindings.hpp"

namespace ferry::python {

struct Kernel {
  KernelRef ref;
};

class RuntimeHandle {
 public:
  explicit RuntimeHandle(Runtime::Options options) {
    nb::gil_scoped_release unlocked;  // connecting to remotes may take a while
    rt_ = std::make_unique<Runtime>(std::move(options));
  }
  ~RuntimeHandle() {
    if (rt_ == nullptr) return;
    // The destructor waits for every task; Python tasks need the GIL to end.
    if (PyGILState_Check() != 0) {
      nb::gil_scoped_release unlocked;
      rt_.reset();
    } else {
      rt_.reset();
    }
  }

  Runtime& rt() {
    if (rt_ == nullptr) throw UsageError("this ferry.Runtime is closed");
    return *rt_;
  }
  bool closed() const noexcept { return rt_ == nullptr; }
  // Under the GIL.
  void close() {
    {
      std::unique_ptr<Runtime> rt = std::move(rt_);
      nb::gil_scoped_release unlocked;
      rt.reset();
    }
    // Its tasks are done: drop the functions of its @rt.task kernels, which
    // would otherwise keep their module's objects alive past exit (PythonFunction).
    for (auto& weak : functions_)
      if (auto fn = weak.lock()) fn->release();
    functions_.clear();
  }

  // The function of an @rt.task kernel of this runtime, released when it closes.
  std::shared_ptr<PythonFunction> keep(nb::object fn) {
    auto kept = std::make_shared<PythonFunction>(std::move(fn));
    functions_.push_back(kept);
    return kept;
  }

 private:
  std::unique_ptr<Runtime> rt_;
  std::vector<std::weak_ptr<PythonFunction>> functions_;
};

}  // namespace ferry::python
