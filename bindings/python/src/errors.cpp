// C++ exceptions become the `ferry` package's exception classes (defined in
// Python, ferry/_errors.py, so they can also derive from ValueError,
// MemoryError, ...), with the same message.
#include "bindings.hpp"
#include "ferry/error.hpp"

namespace ferry::python {

namespace {

// Looked up at the first error rather than at import, so the extension can
// be imported on its own (stub generation does).
PyObject* error_class(const char* name) {
  try {
    nb::object errors = nb::module_::import_("ferry._errors");
    return errors.attr(name).ptr();  // the module keeps the class alive
  } catch (const nb::python_error&) {
    return PyExc_RuntimeError;
  }
}

void raise(const char* name, const char* message) {
  PyObject* type = error_class(name);
  PyErr_SetString(type, message);
}

}  // namespace

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const CompileError& e) {
      raise("CompileError", e.what());
    } catch (const UsageError& e) {
      raise("UsageError", e.what());
    } catch (const OutOfMemory& e) {
      raise("OutOfMemory", e.what());
    } catch (const KernelError& e) {
      raise("KernelError", e.what());
    } catch (const ProtocolError& e) {
      raise("ProtocolError", e.what());
    } catch (const RemoteError& e) {
      raise("RemoteError", e.what());
    } catch (const UcxError& e) {
      raise("TransportError", e.what());
    } catch (const CudaError& e) {
      raise("CudaError", e.what());
    } catch (const Error& e) {
      raise("FerryError", e.what());
    }
  });
}

}  // namespace ferry::python
