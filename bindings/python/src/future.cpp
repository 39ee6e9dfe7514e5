// ferry.Future: a submitted task. result() waits with the GIL released and
// stays interruptible (Ctrl-C raises KeyboardInterrupt; the task goes on).
#include <fmt/format.h>

#include "bindings.hpp"

namespace ferry::python {

namespace {

void wait_task(const Future& f, double timeout) {
  if (f.task.done()) return;
  interruptible_wait([&](std::chrono::milliseconds slice) { return f.task.wait_for(slice); }, timeout);
}

double none_as_forever(const nb::object& timeout) { return timeout.is_none() ? -1.0 : nb::cast<double>(timeout); }

}  // namespace

void bind_future(nb::module_& m) {
  nb::class_<Future>(m, "Future", "A submitted task: result(), done(), explain()")
      .def("result", [](const Future& f, nb::object timeout) -> nb::object {
        wait_task(f, none_as_forever(timeout));
        f.task.wait();  // rethrows the task's error
        if (!f.task.has_result()) return nb::none();
        return nb::float_(f.task.result());
      }, nb::arg("timeout") = nb::none(),
         "Waits for the task (at most `timeout` seconds: TimeoutError) and returns its scalar result, or None\n"
         "for kernels that return none. Raises the task's error (ferry.KernelError) if it failed.")
      .def("wait", [](const Future& f, nb::object timeout) {
        wait_task(f, none_as_forever(timeout));
        f.task.wait();
      }, nb::arg("timeout") = nb::none(), "Waits for the task; raises its error if it failed")
      .def("done", [](const Future& f) { return f.task.done(); })
      .def_prop_ro("id", [](const Future& f) { return f.task.id(); })
      .def_prop_ro("name", [](const Future& f) { return f.task.name(); })
      .def_prop_ro("kernel", [](const Future& f) { return f.task.kernel(); })
      .def_prop_ro("device", [](const Future& f) { return f.task.device(); }, "Where the task was placed, e.g. 'cpu'")
      .def_prop_ro("run_seconds", [](const Future& f) { return f.task.run_seconds(); },
                   "How long its kernel ran (0 until done)")
      .def("explain", [](const Future& f) { return f.task.explain(); },
           "The devices the scheduler considered, with their estimates, and why it chose this one")
      .def("__float__", [](const Future& f) {
        wait_task(f, -1);
        return f.task.result();
      })
      .def("__repr__", [](const Future& f) {
        return fmt::format("ferry.Future(task={}, kernel='{}', device='{}', {})", f.task.id(), f.task.kernel(),
                           f.task.device(), f.task.done() ? "done" : "pending");
      });
}

}  // namespace ferry::python
