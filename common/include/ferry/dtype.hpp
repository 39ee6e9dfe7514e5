// Element types a buffer can hold: one enumeration for the runtime, the
// wire protocol and ferryd.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ferry {

// u8 is the number uint8; b8 holds bools (0 or 1, C++'s bool). New types go
// last: the wire protocol sends the enumerator's value (protocol::DType is
// this enumeration, and a message naming a value past the last is refused).
enum class DType : std::uint8_t { f32, f64, i32, i64, u8, i8, i16, u16, u32, u64, b8, c64, c128 };

constexpr std::size_t size_of(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::i8: return 1;
    case DType::i16: return 2;
    case DType::u16: return 2;
    case DType::u32: return 4;
    case DType::u64: return 8;
    case DType::b8: return 1;
    case DType::c64: return 8;
    case DType::c128: return 16;
  }
  return 0;
}

// Every type, in enumerator order.
inline constexpr DType all_dtypes[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::i8, DType::i16,
                                       DType::u16, DType::u32, DType::u64, DType::b8,  DType::c64, DType::c128};

template <typename T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::f32;
  else if constexpr (std::is_same_v<U, double>) return DType::f64;
  else if constexpr (std::is_same_v<U, std::int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<U, std::int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<U, std::int16_t>) return DType::i16;
  else if constexpr (std::is_same_v<U, std::uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<U, std::uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<U, std::uint64_t>) return DType::u64;
  else if constexpr (std::is_same_v<U, bool>) return DType::b8;
  else if constexpr (std::is_same_v<U, std::complex<float>>) return DType::c64;
  else if constexpr (std::is_same_v<U, std::complex<double>>) return DType::c128;
  else static_assert(sizeof(U) == 0, "Ferry buffers hold the array API's types: float, double, (u)int8..64, bool, complex");
}

}  // namespace ferry
