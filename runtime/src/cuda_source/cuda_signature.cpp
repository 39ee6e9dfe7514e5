// The C types a kernel's parameters may have (the parser reads them in
// cuda_signature_parser.cpp, the calls are checked in cuda_signature_launch.cpp).
#include "cuda_source/cuda_signature.hpp"

namespace ferry::detail {

std::size_t size_of(CType type) noexcept {
  switch (type) {
    case CType::i8:
    case CType::u8:
    case CType::boolean: return 1;
    case CType::i16:
    case CType::u16: return 2;
    case CType::i32:
    case CType::u32:
    case CType::f32: return 4;
    case CType::i64:
    case CType::u64:
    case CType::f64: return 8;
    case CType::void_: return 0;
  }
  return 0;
}

const char* to_string(CType type) noexcept {
  switch (type) {
    case CType::i8: return "signed char";
    case CType::u8: return "unsigned char";
    case CType::i16: return "short";
    case CType::u16: return "unsigned short";
    case CType::i32: return "int";
    case CType::u32: return "unsigned int";
    case CType::i64: return "long long";
    case CType::u64: return "unsigned long long";
    case CType::f32: return "float";
    case CType::f64: return "double";
    case CType::boolean: return "bool";
    case CType::void_: return "void";
  }
  return "?";
}

bool is_real(CType type) noexcept { return type == CType::f32 || type == CType::f64; }

std::vector<DType> buffer_dtypes(CType pointee) {
  switch (pointee) {
    case CType::f32: return {DType::f32};
    case CType::f64: return {DType::f64};
    // The exact type first; then the same width of the other signedness,
    // which kernels written before Ferry stored unsigned types still take.
    case CType::i32: return {DType::i32};
    case CType::u32: return {DType::u32, DType::i32};
    case CType::i64: return {DType::i64};
    case CType::u64: return {DType::u64, DType::i64};
    case CType::i8: return {DType::i8, DType::u8};
    case CType::u8: return {DType::u8, DType::b8};
    case CType::boolean: return {DType::b8, DType::u8};
    case CType::i16: return {DType::i16};
    case CType::u16: return {DType::u16};
    case CType::void_: return {};
  }
  return {DType::u8};  // unreachable for pointees the parser accepts
}

}  // namespace ferry::detail
