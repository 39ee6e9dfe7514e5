// ferry.numpy's fused programs as CUDA source (runtime/kernels/fused_cuda.cpp):
// ferry.numpy compiles it with Runtime.cuda_kernel for tasks placed on a GPU.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "fused_cuda.hpp"

namespace ferry::python {
namespace {

DType code_type(const std::string& code) {
  if (const auto type = dtype_named(code)) return *type;
  throw UsageError(fmt::format("element type {} is not one Ferry stores", code));
}

}  // namespace

void bind_fused(nb::module_& m) {
  m.def("_fused_cuda_source",
        [](const std::string& program, const std::vector<std::string>& inputs, const std::string& y,
           const std::string& entry) {
          std::vector<DType> types;
          for (const std::string& t : inputs) types.push_back(code_type(t));
          return kernels::fused_cuda_source(program, types, code_type(y), entry);
        },
        nb::arg("program"), nb::arg("inputs"), nb::arg("y"), nb::arg("entry"),
        "CUDA source computing a fused program: entry(long long n, Y* y, const X0* x0, ...)");
}

}  // namespace ferry::python
