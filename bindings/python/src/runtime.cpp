// ferry._Runtime: the C++ Runtime behind the Python ferry.Runtime (which
// subclasses it and adds the kernel methods). Waits release the GIL; close()
// and garbage collection wait for running tasks without holding it, so
// Python tasks on the workers can finish.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <numeric>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "runtime_handle.hpp"
#include "ferry/allocator/slab_pool.hpp"

namespace ferry::python {

Array array_empty(Runtime& rt, std::vector<std::size_t> shape, DType dtype, bool zero);
Array array_from(Runtime& rt, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> source);
Array array_unified(Runtime& rt, std::vector<std::size_t> shape, DType dtype, bool zero);

namespace {

DType stored_dtype(const std::string& name) {
  if (const auto type = dtype_named(name)) return *type;
  throw UsageError(fmt::format("element type {} is not one Ferry stores; use (u)int8..64, float32/64, complex64/128 or bool",
                               name));
}


const char* kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::buffer: return "array";
    case ParamKind::real: return "real";
    case ParamKind::integer: return "integer";
    case ParamKind::text: return "text";
  }
  return "?";
}

std::string py_type_name(nb::handle h) { return nb::cast<std::string>(nb::handle(Py_TYPE(h.ptr())).attr("__name__")); }

TaskArg convert_arg(nb::handle arg, const KernelDef& kernel, std::size_t i) {
  if (nb::isinstance<Array>(arg)) {
    const Array& a = nb::cast<const Array&>(arg);
    AccessMode mode = AccessMode::read;
    if (i < kernel.params.size()) {
      if (kernel.params[i].kind != ParamKind::buffer) {
        throw UsageError(fmt::format("kernel {}: argument {} '{}' is a {}, but an array was given", kernel.name, i + 1,
                                     kernel.params[i].name, kind_name(kernel.params[i].kind)));
      }
      mode = kernel.params[i].mode;
    }
    return BufferAccess{a.buffer.state(), mode};
  }
  if (nb::isinstance<Access>(arg)) {
    const Access& x = nb::cast<const Access&>(arg);
    return BufferAccess{x.array.buffer.state(), x.mode};
  }
  if (PyBool_Check(arg.ptr()) || PyLong_Check(arg.ptr())) return ScalarValue(nb::cast<std::int64_t>(arg));
  if (PyFloat_Check(arg.ptr())) return ScalarValue(nb::cast<double>(arg));
  if (PyUnicode_Check(arg.ptr())) return ScalarValue(nb::cast<std::string>(arg));
  const bool arrayish = nb::hasattr(arg, "__array__") || nb::hasattr(arg, "__dlpack__");
  const bool scalar_array = arrayish && nb::hasattr(arg, "ndim") && nb::cast<int>(arg.attr("ndim")) == 0;
  const std::string param = i < kernel.params.size() ? fmt::format(" '{}'", kernel.params[i].name) : "";
  if (arrayish && !scalar_array) {
    throw UsageError(fmt::format("kernel {}: argument {}{} is a {}; tasks take ferry arrays: wrap it with rt.array(...)",
                                 kernel.name, i + 1, param, py_type_name(arg)));
  }
  // NumPy scalars and anything else number-like.
  if (nb::hasattr(arg, "__index__")) return ScalarValue(nb::cast<std::int64_t>(arg.attr("__index__")()));
  if (nb::hasattr(arg, "__float__")) return ScalarValue(nb::cast<double>(arg.attr("__float__")()));
  throw UsageError(fmt::format("kernel {}: argument {}{} is a {}; give a ferry.Array, a number or a string", kernel.name,
                               i + 1, param, py_type_name(arg)));
}

std::shared_ptr<const KernelDef> resolve(Runtime& rt, nb::handle kernel) {
  if (nb::isinstance<Kernel>(kernel)) return nb::cast<const Kernel&>(kernel).ref.def;
  if (PyUnicode_Check(kernel.ptr())) return rt.find_kernel(nb::cast<std::string>(kernel)).def;
  throw UsageError(fmt::format("a kernel is given by name or as a ferry.Kernel, not a {}", py_type_name(kernel)));
}

Future submit(RuntimeHandle& h, nb::handle kernel, nb::sequence args, const std::string& on, std::string name) {
  Runtime& rt = h.rt();
  auto def = resolve(rt, kernel);
  std::vector<TaskArg> converted;
  const std::size_t n = nb::len(args);
  converted.reserve(n);
  for (std::size_t i = 0; i < n; ++i) converted.push_back(convert_arg(args[i], *def, i));
  std::vector<TaskArg> accesses;  // for hold_back_views once the task is in
  for (const TaskArg& arg : converted)
    if (std::holds_alternative<BufferAccess>(arg)) accesses.push_back(arg);
  try {
    Future submitted{rt.submit_args(KernelRef{def}, std::move(converted), parse_place(on), std::move(name))};
    hold_back_views(accesses);  // only a task that was taken holds them back
    return submitted;
  } catch (const UsageError& e) {
    // Kernels see an N-D array as rows x last dimension; say so, or a 3-D
    // array refused by gemm reads as a puzzling 6 x 4.
    std::string note;
    for (std::size_t i = 0; i < n; ++i) {
      if (!nb::isinstance<Array>(args[i])) continue;
      const auto& shape = nb::cast<const Array&>(args[i]).shape;
      if (shape.size() <= 2) continue;
      const std::string param = i < def->params.size() ? fmt::format(" '{}'", def->params[i].name) : "";
      note += fmt::format("; argument {}{} is a {}-D array of shape ({}), which kernels see as {} x {}", i + 1, param,
                          shape.size(), fmt::join(shape, ", "),
                          std::accumulate(shape.begin(), shape.end() - 1, std::size_t{1}, std::multiplies<>()),
                          shape.back());
    }
    if (note.empty()) throw;
    throw UsageError(e.what() + note);
  }
}

using CudaTensor = nb::ndarray<nb::ro, nb::device::cuda>;

// The import copies a CUDA tensor's bytes as they lie, so they must be its
// elements in C order. DLPack strides count elements; a dimension of one
// element may carry any stride. (Declared c_contig, nanobind would refuse a
// strided tensor with "incompatible function arguments" instead: it cannot
// copy device memory to make one.)
void require_c_contiguous(const CudaTensor& source) {
  std::int64_t expected = 1;
  bool contiguous = true;
  std::string shape, strides;
  for (std::size_t i = source.ndim(); i-- > 0;) {
    if (source.shape(i) != 1 && source.stride(i) != expected) contiguous = false;
    expected *= static_cast<std::int64_t>(source.shape(i));
  }
  if (contiguous) return;
  for (std::size_t i = 0; i < source.ndim(); ++i) {
    shape += fmt::format("{}{}", i == 0 ? "" : ", ", source.shape(i));
    strides += fmt::format("{}{}", i == 0 ? "" : ", ", source.stride(i));
  }
  throw UsageError(fmt::format("from_dlpack: the tensor on CUDA GPU {} is not C-contiguous (shape ({}), strides ({}) "
                               "in elements): Ferry copies device memory as it lies; pass a contiguous copy "
                               "(tensor.contiguous() in PyTorch, cupy.ascontiguousarray in CuPy)",
                               source.device_id(), shape, strides));
}

nb::dict kernel_info(const KernelDef& k) {
  nb::dict d;
  d["name"] = k.name;
  d["summary"] = k.summary;
  nb::list params;
  for (const Param& p : k.params) {
    nb::dict e;
    e["name"] = p.name;
    e["kind"] = kind_name(p.kind);
    if (p.kind == ParamKind::buffer) e["mode"] = to_string(p.mode);
    nb::list dtypes;
    for (DType t : p.dtypes) dtypes.append(to_string(t));
    e["dtypes"] = dtypes;
    if (p.default_value) {
      std::visit([&](const auto& v) { e["default"] = nb::cast(v); }, *p.default_value);
    }
    params.append(e);
  }
  d["params"] = params;
  d["cpu"] = static_cast<bool>(k.cpu);
  d["cuda"] = static_cast<bool>(k.cuda);
  d["returns_scalar"] = k.returns_scalar;
  return d;
}

}  // namespace

Place parse_place(const std::string& text) {
  if (text.empty() || text == "any") return anywhere();
  if (text == "cpu") return cpu();
  if (text == "gpu") return gpu();
  if (text.starts_with("gpu:")) {
    try {
      return gpu(std::stoi(text.substr(4)));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("on='{}': a GPU is named gpu:N with N its ordinal", text));
    }
  }
  if (text == "remote") return remote();
  if (text.starts_with("remote:")) return remote(text.substr(7));
  throw UsageError(fmt::format("on='{}' is not a place; use 'cpu', 'gpu', 'gpu:N', 'remote' or 'remote:host:port'",
                               text));
}

void bind_runtime(nb::module_& m) {
  nb::class_<Kernel>(m, "Kernel", "A kernel known to a runtime; call it through Runtime.submit or as returned")
      .def_prop_ro("name", [](const Kernel& k) { return k.ref.def->name; })
      .def_prop_ro("info", [](const Kernel& k) { return kernel_info(*k.ref.def); })
      .def("__repr__", [](const Kernel& k) { return fmt::format("ferry.Kernel('{}')", k.ref.def->name); });

  nb::class_<RuntimeHandle>(m, "_Runtime")
      .def("__init__",
           [](RuntimeHandle* self, unsigned workers, std::optional<std::string> policy, bool trace,
              std::optional<std::string> trace_path, bool explain, std::optional<std::vector<std::string>> remotes,
              std::optional<std::string> token, std::optional<std::string> token_file,
              std::optional<std::size_t> chunk_bytes, std::optional<unsigned> chunk_window,
              std::optional<bool> persist_perf_models, std::optional<std::string> perf_model_dir,
              bool read_environment, std::optional<std::string> gpus, std::optional<std::size_t> gpu_memory_limit,
              std::optional<std::string> remote_policy, std::optional<double> remote_timeout,
              std::optional<double> remote_liveness, std::optional<std::string> identity, std::optional<std::string> known_hosts,
              std::optional<bool> strict_host_keys, std::optional<bool> plaintext,
              std::optional<bool> encrypt_loopback) {
             Runtime::Options o;
             o.workers = workers;
             if (policy) o.policy = parse_policy(*policy);
             o.trace = trace || trace_path.has_value();
             if (trace_path) o.trace_path = *trace_path;
             o.explain = explain;
             if (remotes) o.remotes = *remotes;
             if (token) o.token = *token;
             if (token_file) o.token_file = *token_file;
             if (chunk_bytes) o.chunk_bytes = *chunk_bytes;
             if (chunk_window) o.chunk_window = *chunk_window;
             if (persist_perf_models) o.persist_perf_models = *persist_perf_models;
             if (perf_model_dir) o.perf_model_dir = *perf_model_dir;
             o.read_environment = read_environment;
             if (gpus) o.gpus = *gpus;
             if (gpu_memory_limit) o.gpu_memory_limit = *gpu_memory_limit;
             if (remote_policy) {
               if (*remote_policy == "require") o.remote_policy = RemotePolicy::require;
               else if (*remote_policy == "prefer") o.remote_policy = RemotePolicy::prefer;
               else throw UsageError(fmt::format("remote_policy '{}': expected 'require' or 'prefer'", *remote_policy));
             }
             if (remote_timeout) {
               if (!(*remote_timeout > 0)) throw UsageError("remote_timeout must be a positive number of seconds");
               o.remote_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*remote_timeout * 1000));
             }
             if (remote_liveness) {
               const double s = *remote_liveness;
               if (!(s == 0 || (s >= 0.05 && s <= 3600)))
                 throw UsageError(fmt::format("remote_liveness={}: seconds from 0.05 to 3600, or 0 for off", s));
               o.remote_liveness = std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
             }
             // The link's security settings; FERRY_IDENTITY, FERRY_KNOWN_HOSTS,
             // FERRY_STRICT_HOST_KEYS, FERRY_PLAINTEXT and FERRY_ENCRYPT_LOOPBACK,
             // where set, override them (Runtime::read_link_environment).
             if (identity) o.identity = *identity;
             if (known_hosts) o.known_hosts = *known_hosts;
             if (strict_host_keys) o.strict_host_keys = *strict_host_keys;
             if (plaintext) o.plaintext = *plaintext;
             if (encrypt_loopback) o.encrypt_loopback = *encrypt_loopback;
             new (self) RuntimeHandle(std::move(o));
           },
           nb::arg("workers") = 0, nb::arg("policy") = nb::none(), nb::arg("trace") = false,
           nb::arg("trace_path") = nb::none(), nb::arg("explain") = false, nb::arg("remotes") = nb::none(),
           nb::arg("token") = nb::none(), nb::arg("token_file") = nb::none(), nb::arg("chunk_bytes") = nb::none(),
           nb::arg("chunk_window") = nb::none(), nb::arg("persist_perf_models") = nb::none(),
           nb::arg("perf_model_dir") = nb::none(), nb::arg("read_environment") = true, nb::arg("gpus") = nb::none(),
           nb::arg("gpu_memory_limit") = nb::none(), nb::arg("remote_policy") = nb::none(),
           nb::arg("remote_timeout") = nb::none(), nb::arg("remote_liveness") = nb::none(),
           nb::arg("identity") = nb::none(),
           nb::arg("known_hosts") = nb::none(), nb::arg("strict_host_keys") = nb::none(),
           nb::arg("plaintext") = nb::none(), nb::arg("encrypt_loopback") = nb::none())
      .def("close", &RuntimeHandle::close, "Waits for every task, then releases the runtime's devices and memory")
      .def_prop_ro("closed", &RuntimeHandle::closed)
      .def("_empty", [](RuntimeHandle& h, std::vector<std::size_t> shape, const std::string& dtype, bool zero) {
        return array_empty(h.rt(), std::move(shape), stored_dtype(dtype), zero);
      })
      .def("_unified", [](RuntimeHandle& h, std::vector<std::size_t> shape, const std::string& dtype, bool zero) {
        return array_unified(h.rt(), std::move(shape), stored_dtype(dtype), zero);
      })
      .def("_import_cuda", [](RuntimeHandle& h, const Array& a, int gpu, CudaTensor source) {
        if (from_dlpack(source.dtype()) != a.buffer.dtype() || source.size() != a.buffer.size())
          throw UsageError("from_dlpack: the device array does not match the array made for it");
        // The capsule's device is where the data is; __dlpack_device__ named
        // the GPU Ferry chose to copy on. They must agree.
        if (source.device_id() != gpu)
          throw UsageError(fmt::format("from_dlpack: the tensor said it was on CUDA GPU {} (__dlpack_device__), "
                                       "but its DLPack capsule is on GPU {}",
                                       gpu, source.device_id()));
        require_c_contiguous(source);
        Runtime& rt = h.rt();
        const void* data = source.data();
        nb::gil_scoped_release unlocked;
        rt.import_device_data(a.buffer, gpu, data);
      })
      .def("_array", [](RuntimeHandle& h, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> source) {
        return array_from(h.rt(), source);
      })
      .def("_submit", &submit, nb::arg("kernel"), nb::arg("args"), nb::arg("on") = "", nb::arg("name") = "")
      .def("wait", [](RuntimeHandle& h, nb::object timeout) {
        Runtime& rt = h.rt();
        const double t = timeout.is_none() ? -1.0 : nb::cast<double>(timeout);
        interruptible_wait([&](std::chrono::milliseconds slice) { return rt.wait_for(slice); }, t);
      }, nb::arg("timeout") = nb::none(),
         "Waits for every task submitted so far (at most `timeout` seconds: TimeoutError); raises the first\n"
         "failure since the last wait. Ctrl-C interrupts the wait, not the tasks.")
      .def("kernel_names", [](RuntimeHandle& h) { return h.rt().kernel_names(); })
      .def("has_kernel", [](RuntimeHandle& h, const std::string& name) { return h.rt().has_kernel(name); })
      .def("kernel", [](RuntimeHandle& h, const std::string& name) { return Kernel{h.rt().find_kernel(name)}; },
           nb::arg("name"), "Looks a kernel up by name (this runtime's, then built-ins and plugins)")
      .def("_python_kernel", [](RuntimeHandle& h, std::string name,
                                std::vector<std::pair<std::string, std::string>> params, nb::object fn,
                                bool returns_scalar) {
        return Kernel{h.rt().add_kernel(make_python_kernel(std::move(name), params, h.keep(std::move(fn)), returns_scalar))};
      })
      .def("_cuda_kernel", [](RuntimeHandle& h, std::string source, std::string entry, std::vector<std::string> writes,
                              std::vector<std::string> options) {
        return Kernel{h.rt().cuda_kernel(std::move(source), std::move(entry), std::move(writes), std::move(options))};
      })
      .def("load_plugin", [](RuntimeHandle& h, const std::string& path) { h.rt().load_plugin(path); },
           nb::arg("path"), "Loads a shared library of FERRY_KERNEL kernels")
      .def("devices", [](RuntimeHandle& h) {
        nb::list out;
        for (const DeviceInfo& d : h.rt().devices()) {
          nb::dict e;
          e["id"] = d.id;
          e["name"] = d.name;
          e["kind"] = to_string(d.kind);
          e["node"] = d.node;
          e["lanes"] = d.lanes;
          e["tasks_run"] = d.tasks_run;
          out.append(e);
        }
        return out;
      }, "The devices tasks may run on, with how many tasks each has run")
      .def("add_remote", [](RuntimeHandle& h, const std::string& address) {
        nb::gil_scoped_release unlocked;  // connects, and may wait for it
        h.rt().add_remote(address);
      }, nb::arg("address"), "Adds a GPU host (host:port, ucx://host:port or dns:NAME:PORT) while the program runs")
      .def("remove_remote", [](RuntimeHandle& h, const std::string& address) {
        nb::gil_scoped_release unlocked;  // drains the host: its tasks may be Python tasks needing the GIL
        h.rt().remove_remote(address);
      }, nb::arg("address"), "Drains a GPU host out of the pool; returns once it is out")
      .def_prop_ro("listen_port", [](RuntimeHandle& h) { return h.rt().listen_port(); },
                   "The port FERRY_LISTEN bound for hosts that dial in (ferryd --connect); 0 when not listening")
      .def("remote_stats", [](RuntimeHandle& h, const std::string& address) {
        Runtime::RemoteStats s;
        {
          nb::gil_scoped_release unlocked;
          s = h.rt().remote_stats(address);
        }
        nb::dict d;
        d["connected"] = s.connected;
        d["bytes_shipped"] = s.bytes_shipped;
        d["bytes_fetched"] = s.bytes_fetched;
        d["bytes_from_hosts"] = s.bytes_from_hosts;  // pulled from other hosts directly
        d["server_tasks"] = s.server_tasks;
        d["server_replicas"] = s.server_replicas;
        d["server_bytes_in"] = s.server_bytes_in;
        d["server_bytes_out"] = s.server_bytes_out;
        d["server_memory_in_use"] = s.server_memory_in_use;
        d["server"] = s.server;
        d["kernels"] = s.kernels;
        d["server_devices"] = s.server_devices;
        d["latency_seconds"] = s.latency_seconds;
        d["bytes_per_second"] = s.bytes_per_second;
        d["down_reason"] = s.down_reason;
        d["tasks_forwarded"] = s.tasks_forwarded;
        d["lineage_checkpoints"] = s.lineage_checkpoints;
        return d;
      }, nb::arg("address"))
      .def("recovery", [](RuntimeHandle& h) {
        const auto r = h.rt().recovery();
        nb::dict d;
        d["tasks_placed_again"] = r.tasks_placed_again;
        d["placed_again_seconds"] = r.placed_again_seconds;
        d["lineage_replays"] = r.lineage_replays;
        d["replay_seconds"] = r.replay_seconds;
        return d;
      }, "Work done again because a device was lost: tasks placed again elsewhere and lineage replays, "
         "with their runs' seconds added up")
      .def_prop_ro("remotes", [](RuntimeHandle& h) { return h.rt().options().remotes; })
      .def_prop_ro("policy", [](RuntimeHandle& h) { return std::string(to_string(h.rt().options().policy)); })
      .def("host_memory", [](RuntimeHandle& h) {
        nb::dict d;
        auto memory = h.rt().host_memory();
        d["describe"] = memory->describe();
        if (auto* pool = dynamic_cast<SlabPool*>(memory.get())) {
          const auto s = pool->stats();
          d["reserved"] = s.slab_bytes;
          d["peak_reserved"] = s.peak_slab_bytes;
          d["in_use"] = s.bytes_out;
        }
        return d;
      }, "The pinned host pool: bytes reserved from the system and handed out")
      .def("trace_json", [](RuntimeHandle& h) -> std::optional<std::string> {
        const Trace* t = h.rt().trace();
        if (t == nullptr) return std::nullopt;
        return t->chrome_json();
      })
      .def("summary", [](RuntimeHandle& h) { return h.rt().summary().to_text(); })
      .def("write_trace", [](RuntimeHandle& h, const std::string& path) { h.rt().write_trace(path); }, nb::arg("path"))
      .def("describe", [](RuntimeHandle& h) { return h.rt().describe(); });
}

}  // namespace ferry::python
