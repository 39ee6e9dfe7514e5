#include <fmt/format.h>

#include "ferry/runtime/access.hpp"
#include "ferry/runtime/dtype.hpp"
#include "ferry/runtime/place.hpp"

namespace ferry {

const char* to_string(DType type) noexcept {
  switch (type) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::i8: return "int8";
    case DType::i16: return "int16";
    case DType::u16: return "uint16";
    case DType::u32: return "uint32";
    case DType::u64: return "uint64";
    case DType::b8: return "bool";
    case DType::c64: return "complex64";
    case DType::c128: return "complex128";
  }
  return "unknown";
}

const char* to_string(AccessMode mode) noexcept {
  switch (mode) {
    case AccessMode::read: return "read";
    case AccessMode::write: return "write";
    case AccessMode::readwrite: return "readwrite";
  }
  return "unknown";
}

const char* to_string(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::remote: return "remote";
  }
  return "unknown";
}

std::string Place::describe() const {
  switch (kind) {
    case Kind::any: return "anywhere";
    case Kind::cpu: return "ferry::cpu()";
    case Kind::gpu: return index < 0 ? "ferry::gpu()" : fmt::format("ferry::gpu({})", index);
    case Kind::remote: return endpoint.empty() ? "ferry::remote()" : fmt::format("ferry::remote(\"{}\")", endpoint);
  }
  return "unknown";
}

}  // namespace ferry
