// Kernels written in Python (@rt.task). They run on the CPU workers; the GIL
// is taken only for the call, and arrays arrive as NumPy views of the host
// replicas (read-only for inputs).
#include <fmt/format.h>

#include <string>
#include <utility>

#include "bindings.hpp"

#if PY_VERSION_HEX >= 0x030D0000
#define FERRY_PY_FINALIZING() Py_IsFinalizing()
#else
#define FERRY_PY_FINALIZING() _Py_IsFinalizing()
#endif

namespace ferry::python {

namespace {

Param param_for(const std::string& name, const std::string& kind) {
  Param p;
  p.name = name;
  if (kind == "read" || kind == "write" || kind == "readwrite") {
    p.kind = ParamKind::buffer;
    p.mode = kind == "read" ? AccessMode::read : kind == "write" ? AccessMode::write : AccessMode::readwrite;
  } else if (kind == "real") {
    p.kind = ParamKind::real;
  } else if (kind == "integer") {
    p.kind = ParamKind::integer;
  } else if (kind == "text") {
    p.kind = ParamKind::text;
  } else {
    throw UsageError(fmt::format("parameter '{}': kind '{}' is not read, write, readwrite, real, integer or text", name,
                                 kind));
  }
  return p;
}

}  // namespace

// The function outlives Python's view of it (task records keep the kernel),
// and may be dropped on a worker thread: the GIL is taken to drop it.
PythonFunction::~PythonFunction() {
  if (!fn_.is_valid()) return;
  if (!Py_IsInitialized() || FERRY_PY_FINALIZING()) {
    fn_.release();  // the interpreter is going away: leaking beats crashing
    return;
  }
  nb::gil_scoped_acquire locked;
  fn_.reset();
}

void PythonFunction::release() { fn_.reset(); }

KernelDef make_python_kernel(std::string name, const std::vector<std::pair<std::string, std::string>>& params,
                             std::shared_ptr<PythonFunction> fn, bool returns_scalar) {
  if (!fn || !PyCallable_Check(fn->get().ptr()))
    throw UsageError(fmt::format("task '{}': the function is not callable", name));
  KernelDef k;
  k.name = std::move(name);
  k.summary = "a Python function";
  for (const auto& [param, kind] : params) k.params.push_back(param_for(param, kind));
  k.returns_scalar = returns_scalar;
  k.cpu = [callable = std::move(fn), returns_scalar](ExecContext& ctx) {
    nb::gil_scoped_acquire locked;
    if (!callable->get().is_valid())
      throw Error("the Python function of this task was released when the runtime that defined it closed");
    try {
      nb::list args;
      for (const Arg& arg : ctx.args.items) {
        if (const auto* buffer = std::get_if<BufferArg>(&arg)) {
          args.append(numpy_of(*buffer, buffer->mode == AccessMode::read));
        } else {
          std::visit([&](const auto& v) { args.append(nb::cast(v)); }, std::get<ScalarValue>(arg));
        }
      }
      nb::object out = callable->get()(*args);
      if (returns_scalar) {
        try {
          ctx.result = nb::cast<double>(out);
        } catch (const nb::cast_error&) {
          throw Error(fmt::format("declared result=True but returned a {}, not a number",
                                  nb::cast<std::string>(nb::handle(Py_TYPE(out.ptr())).attr("__name__"))));
        }
      }
    } catch (nb::python_error& e) {
      // The message carries the Python exception and its traceback; the
      // error object itself holds Python references and must die here, under the GIL.
      std::string text = e.what();
      e.restore();
      PyErr_Clear();
      throw Error(text);
    }
  };
  return k;
}

}  // namespace ferry::python
