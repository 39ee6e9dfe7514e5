// Element types a buffer can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ferry {

enum class DType : std::uint8_t { f32, f64, i32, i64, u8 };

constexpr std::size_t size_of(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* to_string(DType type) noexcept;

template <typename T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::f32;
  else if constexpr (std::is_same_v<U, double>) return DType::f64;
  else if constexpr (std::is_same_v<U, std::int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return DType::u8;
  else static_assert(sizeof(U) == 0, "Ferry buffers hold float, double, int32_t, int64_t or uint8_t");
}

}  // namespace ferry
