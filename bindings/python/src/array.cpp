// ferry.Array: a Ferry buffer with a NumPy face. numpy() is a zero-copy view
// of the host replica; __dlpack__ hands the same memory to other libraries.
#include <fmt/format.h>

#include <cstring>
#include <numeric>
#include <string>

#include "bindings.hpp"

namespace ferry::python {

nb::dlpack::dtype to_dlpack(DType type) {
  switch (type) {
    case DType::f32: return nb::dtype<float>();
    case DType::f64: return nb::dtype<double>();
    case DType::i32: return nb::dtype<std::int32_t>();
    case DType::i64: return nb::dtype<std::int64_t>();
    case DType::u8: return nb::dtype<std::uint8_t>();
    case DType::i8: return nb::dtype<std::int8_t>();
    case DType::i16: return nb::dtype<std::int16_t>();
    case DType::u16: return nb::dtype<std::uint16_t>();
    case DType::u32: return nb::dtype<std::uint32_t>();
    case DType::u64: return nb::dtype<std::uint64_t>();
    case DType::b8: return nb::dtype<bool>();
    case DType::c64:
    case DType::c128: {
      nb::dlpack::dtype t{};
      t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex);
      t.bits = static_cast<std::uint8_t>(8 * size_of(type));
      t.lanes = 1;
      return t;
    }
  }
  return nb::dtype<std::uint8_t>();
}

std::optional<DType> dtype_named(std::string_view name) {
  for (DType d : all_dtypes)
    if (name == to_string(d)) return d;
  return std::nullopt;
}

DType from_dlpack(nb::dlpack::dtype t) {
  for (DType d : all_dtypes) {
    if (to_dlpack(d) == t) return d;
  }
  const char* kind = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) ? "bool"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex) ? "complex"
                                                                                             : "other";
  throw UsageError(fmt::format("element type {}{} is not one Ferry stores; use (u)int8..64, float32/64, complex64/128 "
                               "or bool", kind, t.bits));
}

namespace {

std::vector<std::size_t> view_shape(const BufferBase& b, const std::vector<std::size_t>& shape) {
  if (!shape.empty()) return shape;
  if (b.rows() == 1 && !b.is_view()) return {b.cols()};
  return {b.rows(), b.cols()};
}

// NumPy wants strides for the shape it is given: the last axis is
// contiguous, the one before steps by ld, and any before that by the product.
std::vector<std::int64_t> strides_for(const std::vector<std::size_t>& shape, std::size_t ld) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  if (shape.size() >= 2) {
    strides[shape.size() - 2] = static_cast<std::int64_t>(ld);
    for (std::size_t i = shape.size() - 2; i-- > 0;)
      strides[i] = strides[i + 1] * static_cast<std::int64_t>(shape[i + 1]);
  }
  return strides;
}

nb::object make_numpy(void* data, DType dtype, const std::vector<std::size_t>& shape, std::size_t ld, nb::handle owner,
                      bool readonly) {
  const auto strides = strides_for(shape, ld);
  if (readonly) {
    nb::ndarray<nb::numpy, nb::ro> nd(data, shape.size(), shape.data(), owner, strides.data(), to_dlpack(dtype));
    return nb::cast(nd, nb::rv_policy::reference);
  }
  nb::ndarray<nb::numpy> nd(data, shape.size(), shape.data(), owner, strides.data(), to_dlpack(dtype));
  return nb::cast(nd, nb::rv_policy::reference);
}

Array make_array(Runtime& rt, DType dtype, std::vector<std::size_t> shape, Runtime::Fill fill) {
  if (shape.empty()) throw UsageError("a Ferry array needs at least one dimension (a 0-d scalar is a Python number)");
  const std::size_t cols = shape.back();
  const std::size_t rows =
      std::accumulate(shape.begin(), shape.end() - 1, std::size_t{1}, std::multiplies<>());
  Array a{rt.buffer(dtype, rows, cols, fill), std::move(shape)};
  return a;
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) text += ",";
  return text + ")";
}

std::vector<std::size_t> sub_shape(const AnyBuffer& b, const std::vector<std::size_t>& parent) {
  // A split of a 1-D array stays 1-D; of anything else, rows x cols.
  if (parent.size() == 1) return {b.cols()};
  return {b.rows(), b.cols()};
}

// The NumPy views numpy() handed out that may still be alive (weak
// references), so a task submitted on their array can make them read-only.
// Touched only under the GIL.
struct LiveView {
  std::uint64_t buffer;  // the id every view of one buffer shares
  Region region;
  nb::object ref;  // weakref.ref to the ndarray
};
std::vector<LiveView>& live_views() {
  static auto* views = new std::vector<LiveView>();  // never destroyed: arrays may outlive the module's statics
  return *views;
}

void remember_view(const AnyBuffer& view, const nb::object& array) {
  auto& views = live_views();
  std::erase_if(views, [](const LiveView& v) { return v.ref().is_none(); });
  views.push_back(LiveView{view.id(), view.region(),
                           nb::module_::import_("weakref").attr("ref")(array)});
}

}  // namespace

void hold_back_views(const std::vector<TaskArg>& args) {
  auto& views = live_views();
  if (views.empty()) return;
  for (const TaskArg& arg : args) {
    const auto* access = std::get_if<BufferAccess>(&arg);
    if (access == nullptr || !access->state) continue;
    const AnyBuffer used(access->state);
    for (const LiveView& v : views) {
      if (v.buffer != used.id() || !v.region.overlaps(used.region())) continue;
      nb::object array = v.ref();
      if (array.is_none()) continue;
      // Reading beside a pending reader is safe; anything else would race.
      nb::object flags = array.attr("flags");
      if (nb::cast<bool>(flags.attr("writeable"))) flags.attr("writeable") = false;
    }
  }
  std::erase_if(views, [](const LiveView& v) { return v.ref().is_none(); });
}

nb::object numpy_view(const AnyBuffer& view, const std::vector<std::size_t>& shape, bool readonly) {
  void* data = nullptr;
  {
    nb::gil_scoped_release unlocked;
    // Read-only views keep the copies on GPUs and remotes valid.
    data = readonly ? const_cast<void*>(view.host_data_read()) : view.host_data();
  }
  // The capsule owns a reference to the buffer: the memory outlives the
  // array handle for as long as NumPy needs it.
  auto* keep = new std::shared_ptr<detail::BufferState>(view.state());
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<detail::BufferState>*>(p); });
  nb::object array = make_numpy(data, view.dtype(), view_shape(view, shape), view.ld(), owner, readonly);
  if (!readonly) remember_view(view, array);
  return array;
}

nb::object numpy_of(const BufferArg& arg, bool readonly) {
  std::vector<std::size_t> shape;
  if (arg.rows == 1) shape = {arg.cols};
  else shape = {arg.rows, arg.cols};
  return make_numpy(arg.data, arg.dtype, shape, arg.ld, nb::handle(), readonly);
}

// Module-level helpers the Runtime binding uses to make arrays.
Array array_empty(Runtime& rt, std::vector<std::size_t> shape, DType dtype, bool zero) {
  return make_array(rt, dtype, std::move(shape), zero ? Runtime::Fill::zeros : Runtime::Fill::none);
}

Array array_unified(Runtime& rt, std::vector<std::size_t> shape, DType dtype, bool zero) {
  if (shape.empty()) throw UsageError("a Ferry array needs at least one dimension (a 0-d scalar is a Python number)");
  const std::size_t cols = shape.back();
  const std::size_t rows = std::accumulate(shape.begin(), shape.end() - 1, std::size_t{1}, std::multiplies<>());
  return Array{rt.unified(dtype, rows, cols, zero ? Runtime::Fill::zeros : Runtime::Fill::none), std::move(shape)};
}

Array array_from(Runtime& rt, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> source) {
  const DType dtype = from_dlpack(source.dtype());
  std::vector<std::size_t> shape(source.ndim());
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = source.shape(i);
  if (shape.empty()) shape = {1};
  Array a = make_array(rt, dtype, shape, Runtime::Fill::none);
  const std::size_t bytes = a.buffer.bytes();
  const void* from = source.data();
  nb::gil_scoped_release unlocked;
  std::memcpy(a.buffer.host_data(), from, bytes);
  return a;
}

void bind_array(nb::module_& m) {
  nb::class_<Array>(m, "Array",
                    "An array in Ferry's memory (pinned host memory, with replicas where tasks used it).\n"
                    "Make one with Runtime.array(), empty() or zeros(); read it with numpy().")
      .def_prop_ro("shape", [](const Array& a) {
        nb::list dims;
        for (std::size_t d : view_shape(a.buffer, a.shape)) dims.append(d);
        return nb::tuple(dims);
      }, "The NumPy shape")
      .def_prop_ro("dtype", [](const Array& a) {
        return nb::module_::import_("numpy").attr("dtype")(to_string(a.buffer.dtype()));
      }, "The NumPy element type")
      .def_prop_ro("ndim", [](const Array& a) { return view_shape(a.buffer, a.shape).size(); })
      .def_prop_ro("size", [](const Array& a) { return a.buffer.size(); }, "Elements")
      .def_prop_ro("nbytes", [](const Array& a) { return a.buffer.bytes(); })
      .def_prop_ro("id", [](const Array& a) { return a.buffer.id(); })
      .def_prop_ro("is_view", [](const Array& a) { return a.buffer.is_view(); },
                   "True for a part made by split() or tiles()")
      .def_prop_rw("name", [](const Array& a) { return a.buffer.name(); },
                   [](Array& a, std::string name) { a.buffer.set_name(std::move(name)); },
                   "Shown in errors, explanations and traces")
      .def("numpy", [](const Array& a, bool readonly) { return numpy_view(a.buffer, a.shape, readonly); },
           nb::arg("readonly") = false,
           "Waits for the tasks using this array, brings the host copy up to date and returns a NumPy view of it\n"
           "(no copy). Writes through the view change the array. Submitting a task that uses the array makes\n"
           "the views taken before it read-only (writing one raises ValueError rather than racing with the\n"
           "task); call numpy() again for a writable view: it waits for the task first. readonly=True gives a\n"
           "view NumPy will not write through, and keeps the array's copies on GPUs and remote hosts valid,\n"
           "so the next task there moves no data.")
      .def("__array__", [](const Array& a, nb::object dtype, nb::object copy) {
        nb::object view = numpy_view(a.buffer, a.shape, false);
        if (!dtype.is_none()) view = view.attr("astype")(dtype);
        if (!copy.is_none() && nb::cast<bool>(copy)) view = view.attr("copy")();
        return view;
      }, nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__", [](const Array& a, nb::kwargs kwargs) {
        return numpy_view(a.buffer, a.shape, false).attr("__dlpack__")(**kwargs);
      })
      .def("__dlpack_device__", [](const Array&) { return nb::make_tuple(1, 0); },
           "(kDLCPU, 0): the array's home is host memory")
      .def_prop_ro("host_address", [](const Array& a) {
        nb::gil_scoped_release unlocked;
        return reinterpret_cast<std::uintptr_t>(a.buffer.host_data());
      }, "The address of the first element of the host copy (for zero-copy checks)")
      .def("split", [](const Array& a, std::size_t parts) {
        std::vector<Array> out;
        for (auto& b : a.buffer.split(parts)) {
          auto shape = sub_shape(b, a.shape);
          out.push_back(Array{std::move(b), std::move(shape)});
        }
        return out;
      }, nb::arg("parts"), "`parts` views of nearly equal size: along the elements of a 1-D array, the rows otherwise")
      .def("tiles", [](const Array& a, std::size_t tile_rows, std::size_t tile_cols) {
        std::size_t gr = 0, gc = 0;
        auto parts = a.buffer.tiles(tile_rows, tile_cols, gr, gc);
        nb::list grid;
        for (std::size_t i = 0; i < gr; ++i) {
          nb::list row;
          for (std::size_t j = 0; j < gc; ++j) {
            AnyBuffer& b = parts[i * gc + j];
            row.append(Array{b, {b.rows(), b.cols()}});
          }
          grid.append(row);
        }
        return grid;
      }, nb::arg("tile_rows"), nb::arg("tile_cols"), "A grid (list of rows) of tile_rows x tile_cols views")
      .def("__len__", [](const Array& a) { return view_shape(a.buffer, a.shape).front(); })
      .def("__repr__", [](const Array& a) {
        return fmt::format("ferry.Array(shape={}, dtype={}, name='{}')", shape_text(view_shape(a.buffer, a.shape)),
                           to_string(a.buffer.dtype()), a.buffer.name());
      });

  nb::class_<Access>(m, "Access", "How a task uses an array: ferry.read(a), ferry.write(a), ferry.readwrite(a)")
      .def_prop_ro("array", [](const Access& x) { return x.array; })
      .def_prop_ro("mode", [](const Access& x) { return std::string(to_string(x.mode)); });
  m.def("read", [](const Array& a) { return Access{a, AccessMode::read}; }, nb::arg("array"));
  m.def("write", [](const Array& a) { return Access{a, AccessMode::write}; }, nb::arg("array"));
  m.def("readwrite", [](const Array& a) { return Access{a, AccessMode::readwrite}; }, nb::arg("array"));
}

}  // namespace ferry::python
