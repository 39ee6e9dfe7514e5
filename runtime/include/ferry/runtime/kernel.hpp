// Kernels: a name, a parameter list, a shape check, a cost hint, and an
// implementation per kind of device. Found by name in a registry that
// exists on every host, so a remote host can run a task by its kernel's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ferry/runtime/access.hpp"
#include "ferry/runtime/dtype.hpp"

namespace ferry {

struct CudaSource;  // ferry/runtime/cuda_source.hpp
class MemoryResource;  // ferry/allocator/memory_resource.hpp

// One buffer argument as a kernel sees it: a row-major matrix of `rows` x
// `cols` elements, `ld` elements between row starts. At submission (shape
// checks, cost hints) `data` is null; while the kernel runs it points at the
// replica on the executing device.
struct BufferArg {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t ld = 0;
  AccessMode mode = AccessMode::read;

  std::size_t elements() const noexcept { return rows * cols; }
  std::size_t bytes() const noexcept { return elements() * size_of(dtype); }
  bool contiguous() const noexcept { return rows <= 1 || ld == cols; }
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(data);
  }
};

using ScalarValue = std::variant<double, std::int64_t, std::string>;

// One argument of a call: a buffer or a scalar.
using Arg = std::variant<BufferArg, ScalarValue>;

class KernelArgs {
 public:
  std::vector<Arg> items;

  std::size_t size() const noexcept { return items.size(); }
  const Arg& operator[](std::size_t i) const { return items.at(i); }
  // Typed accessors; a kernel's own parameter list guarantees the kinds, so
  // a mismatch here is a bug in the kernel and throws ferry::Error.
  const BufferArg& buffer(std::size_t i) const;
  double real(std::size_t i) const;          // an integer scalar converts
  std::int64_t integer(std::size_t i) const;
  const std::string& text(std::size_t i) const;
};

// Work a call does, to seed performance models before any run is measured.
struct Cost {
  double flops = 0;
  double bytes = 0;
};

enum class ParamKind : std::uint8_t { buffer, real, integer, text };

struct Param {
  std::string name;
  ParamKind kind = ParamKind::buffer;
  // For buffers, the least access the kernel needs: a `read` parameter
  // accepts read or readwrite, `write` accepts write or readwrite,
  // `readwrite` only readwrite.
  AccessMode mode = AccessMode::read;
  std::vector<DType> dtypes;                 // accepted element types; empty: any
  std::optional<ScalarValue> default_value;  // scalars only: may be left out (trailing)
};

// What a running kernel gets besides its arguments.
struct ExecContext {
  const KernelArgs& args;
  const std::string& task_name;
  int worker = -1;          // CPU worker index, or -1
  // On a GPU: the cudaStream_t to enqueue on and the device's ordinal (already
  // current). A CUDA variant enqueues its work and returns; it synchronizes
  // the stream only when it must read something back (a scalar result).
  void* stream = nullptr;
  int device = -1;
  std::optional<double> result;  // scalar result (dot, nrm2, sum)
  // On a GPU: where a variant takes temporary device memory (reduction
  // partials, solver workspace), stream-ordered on `stream`. The runtime
  // passes the device's DevicePool, so scratch shares the replicas' bound
  // and the pool's release policy.
  MemoryResource* scratch = nullptr;
};

using KernelFn = std::function<void(ExecContext&)>;

struct KernelDef {
  std::string name;
  std::string summary;  // one line, for listings and error messages
  std::vector<Param> params;
  // Throws UsageError naming the offending argument when shapes do not fit
  // (the caller prefixes task and kernel). Runs at submission, data is null.
  std::function<void(const KernelArgs&)> validate;
  std::function<Cost(const KernelArgs&)> cost;
  KernelFn cpu;
  KernelFn cuda;
  bool returns_scalar = false;
  // Elementwise or row-wise: the runtime may split it over sub-ranges.
  bool chunkable = false;
  std::shared_ptr<const CudaSource> cuda_source;  // set for NVRTC kernels: remote hosts compile it
};

// Checks arguments against a kernel's parameters (count, kinds, access modes,
// element types, then the kernel's own shape check) and fills defaults.
// Throws UsageError: "task 'T' (kernel K): argument 2 'y': ...".
void check_arguments(const KernelDef& kernel, KernelArgs& args, std::string_view task_name);

class KernelRegistry {
 public:
  // Built-in kernels and those of loaded plugins.
  static KernelRegistry& global();

  // Throws UsageError when the name is taken or the definition is incomplete.
  void add(KernelDef def);
  const KernelDef* find(std::string_view name) const;
  std::vector<std::string> names() const;

  KernelRegistry();
  ~KernelRegistry();
  KernelRegistry(const KernelRegistry&) = delete;
  KernelRegistry& operator=(const KernelRegistry&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Registers into the global registry during static initialisation; errors
// are kept (throwing there would abort) and reported by load_plugin().
struct KernelRegistration {
  explicit KernelRegistration(KernelDef (*make)()) noexcept;
};
std::vector<std::string> take_registration_errors();
}  // namespace detail

}  // namespace ferry

// In a plugin (or the application):
//   FERRY_KERNEL(my_scale) {
//     ferry::KernelDef k;
//     k.name = "my_scale";
//     ...
//     return k;
//   }
#define FERRY_KERNEL(ident)                                                                        \
  static ::ferry::KernelDef ferry_kernel_make_##ident();                                           \
  [[maybe_unused]] static const ::ferry::detail::KernelRegistration ferry_kernel_registration_##ident{ \
      &ferry_kernel_make_##ident};                                                                 \
  static ::ferry::KernelDef ferry_kernel_make_##ident()
