// What the extension's translation units share: the Python-visible handle
// types and the functions that bind each of them.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::python {

namespace nb = nanobind;

// A Ferry buffer as Python sees it: the buffer plus the NumPy shape it was
// made with (Ferry stores N-D arrays as rows x last-axis matrices).
struct Array {
  AnyBuffer buffer;
  std::vector<std::size_t> shape;
};

// How a task argument uses an array when the caller says so explicitly:
// ferry.read(a), ferry.write(a), ferry.readwrite(a).
struct Access {
  Array array;
  AccessMode mode = AccessMode::read;
};

struct Future {
  Task task;
};

// Waits in short slices with the GIL released, checking for Ctrl-C between
// them: raises KeyboardInterrupt (the work goes on) or TimeoutError.
// `done(slice)` waits at most `slice` and says whether it is over.
template <typename Done>
void interruptible_wait(Done&& done, double timeout_seconds);

nb::dlpack::dtype to_dlpack(DType type);
DType from_dlpack(nb::dlpack::dtype type);
// The element type NumPy calls `name` ("float32", ...: to_string(DType)), or nullopt.
std::optional<DType> dtype_named(std::string_view name);
// A NumPy array over `view`'s host replica (zero-copy; keeps the buffer alive).
nb::object numpy_view(const AnyBuffer& view, const std::vector<std::size_t>& shape, bool readonly);
// Makes the writable NumPy views of the arrays `args` use read-only: a task
// on them is pending, and a write through such a view would race with it.
// Under the GIL, right after the task is submitted (this thread holds the
// GIL throughout, so no Python code writes through a view in between).
void hold_back_views(const std::vector<TaskArg>& args);
// The same over a kernel's argument while a Python task runs (no owner: valid
// only during the call).
nb::object numpy_of(const BufferArg& arg, bool readonly);

// on="cpu" | "gpu" | "gpu:N" | "remote" | "remote:host:port" | "" (anywhere).
Place parse_place(const std::string& text);

void bind_errors(nb::module_& m);
void bind_array(nb::module_& m);
void bind_future(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_bench_support(nb::module_& m);
// The Python function behind an @rt.task kernel. The kernel (C++) holds it,
// and through its globals it often holds the kernel's own Python objects: a
// cycle Python's collector cannot see. The runtime releases the function
// when it closes, so nothing leaks at exit.
class PythonFunction {
 public:
  explicit PythonFunction(nb::object fn) : fn_(std::move(fn)) {}
  PythonFunction(const PythonFunction&) = delete;
  PythonFunction& operator=(const PythonFunction&) = delete;
  ~PythonFunction();
  // Under the GIL. Empty after release().
  const nb::object& get() const noexcept { return fn_; }
  void release();  // under the GIL

 private:
  nb::object fn_;
};

void bind_fused(nb::module_& m);
// The kernel definition behind @rt.task: `params` are (name, kind) with kind
// one of read, write, readwrite, real, integer, text.
KernelDef make_python_kernel(std::string name, const std::vector<std::pair<std::string, std::string>>& params,
                             std::shared_ptr<PythonFunction> fn, bool returns_scalar);

template <typename Done>
void interruptible_wait(Done&& done, double timeout_seconds) {
  using clock = std::chrono::steady_clock;
  const auto slice = std::chrono::milliseconds(50);
  const bool bounded = timeout_seconds >= 0;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(bounded ? timeout_seconds : 0));
  for (;;) {
    bool over = false;
    {
      nb::gil_scoped_release unlocked;
      auto wait = slice;
      if (bounded) wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::max(deadline - clock::now(), clock::duration::zero())));
      over = done(wait);
    }
    if (over) return;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (bounded && clock::now() >= deadline) {
      PyErr_Format(PyExc_TimeoutError, "still running after %.3g s", timeout_seconds);
      throw nb::python_error();
    }
  }
}

}  // namespace ferry::python
