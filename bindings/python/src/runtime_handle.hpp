// The C++ side of ferry.Runtime and ferry.Kernel, shared by the runtime
// binding and the benchmark support.
#pragma once

#include <memory>

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
  void close() {
    std::unique_ptr<Runtime> rt = std::move(rt_);
    nb::gil_scoped_release unlocked;
    rt.reset();
  }

 private:
  std::unique_ptr<Runtime> rt_;
};

}  // namespace ferry::python
