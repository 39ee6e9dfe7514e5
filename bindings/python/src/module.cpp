// The extension module ferry._ferry. The public API is the `ferry` package,
// which wraps and re-exports what is bound here.
#include "bindings.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"

NB_MODULE(_ferry, m) {
  m.doc() = "Ferry's C++ runtime (use the `ferry` package, not this module)";
  m.attr("version") = ferry::config::version;
  m.attr("with_cuda") = ferry::config::with_cuda;
  m.def("cuda_device_count", &ferry::cuda::device_count, "CUDA devices this process can use (0 without a driver)");
  m.def("cuda_unavailable_reason", &ferry::cuda::unavailable_reason, "Why there are no CUDA devices, or ''");
  ferry::python::bind_errors(m);
  ferry::python::bind_array(m);
  ferry::python::bind_future(m);
  ferry::python::bind_runtime(m);
  ferry::python::bind_bench_support(m);
  ferry::python::bind_fused(m);
}
