// What bench/python_overhead_bench.py needs to compare Python with C++ in
// one run on one runtime: the same empty kernels as bench/task_overhead_bench,
// and the same submit loop driven from C++.
#include <chrono>
#include <vector>

#include "bindings.hpp"
#include "runtime_handle.hpp"

namespace ferry::python {

void bind_bench_support(nb::module_& m) {
  m.def("_bench_kernels", [](RuntimeHandle& h) {
    Runtime& rt = h.rt();
    nb::dict out;
    out["empty"] = Kernel{rt.has_kernel("bench_empty") ? rt.find_kernel("bench_empty") : rt.kernel("bench_empty", [] {})};
    out["touch"] = Kernel{rt.has_kernel("bench_touch") ? rt.find_kernel("bench_touch")
                                                        : rt.kernel("bench_touch", [](InOut<double>) {})};
    return out;
  });
  // n tasks of `kernel` (on `array` readwrite when given: a chain), then a wait; seconds taken.
  m.def("_cpp_submit_loop", [](RuntimeHandle& h, const Kernel& kernel, std::size_t n, const Array* array) {
    Runtime& rt = h.rt();
    nb::gil_scoped_release unlocked;
    const auto start = std::chrono::steady_clock::now();
    if (array != nullptr) {
      for (std::size_t i = 0; i < n; ++i) rt.submit(kernel.ref, readwrite(array->buffer));
    } else {
      for (std::size_t i = 0; i < n; ++i) rt.submit(kernel.ref);
    }
    rt.wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }, nb::arg("rt"), nb::arg("kernel"), nb::arg("n"), nb::arg("array").none() = nb::none());
  // n round trips of `kernel`(array readwrite, alpha) placed `on`, each
  // submitted and waited for alone, as rt.scal(x, a, on=...).result() does
  // from Python: the C++ figure beside Python's in the same run; seconds each.
  m.def("_cpp_round_trips", [](RuntimeHandle& h, const std::string& kernel, const Array& array, double alpha,
                               const std::string& on, std::size_t n) {
    Runtime& rt = h.rt();
    const Place place = parse_place(on);
    std::vector<double> seconds(n);
    {
      nb::gil_scoped_release unlocked;
      for (double& s : seconds) {
        const auto start = std::chrono::steady_clock::now();
        rt.submit(kernel, readwrite(array.buffer), alpha, ferry::on(place)).wait();
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    nb::list out;
    for (double s : seconds) out.append(s);
    return out;
  }, nb::arg("rt"), nb::arg("kernel"), nb::arg("array"), nb::arg("alpha"), nb::arg("on"), nb::arg("n"));
  // n tasks of `kernel`(array readwrite, alpha) placed `on`, one chain, then
  // a wait: the C++ figure beside Python's remote chain; seconds in all.
  m.def("_cpp_chain", [](RuntimeHandle& h, const std::string& kernel, const Array& array, double alpha,
                         const std::string& on, std::size_t n) {
    Runtime& rt = h.rt();
    const Place place = parse_place(on);
    nb::gil_scoped_release unlocked;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) rt.submit(kernel, readwrite(array.buffer), alpha, ferry::on(place));
    rt.wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }, nb::arg("rt"), nb::arg("kernel"), nb::arg("array"), nb::arg("alpha"), nb::arg("on"), nb::arg("n"));
}

}  // namespace ferry::python
