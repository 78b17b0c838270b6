// Element types of kiln arrays and their properties. One place for dtype facts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace kiln {

// Order matters only for printing; rules are explicit (see docs/DTYPES.md).
// kBF16 is last so that the values of the others (in serialized cache keys)
// did not change when it was added.
enum class DType : std::uint8_t { kBool, kI32, kU32, kF16, kF32, kF64, kBF16 };

inline constexpr DType bool_ = DType::kBool;
inline constexpr DType i32 = DType::kI32;
inline constexpr DType u32 = DType::kU32;
inline constexpr DType f16 = DType::kF16;
inline constexpr DType bf16 = DType::kBF16;
inline constexpr DType f32 = DType::kF32;
inline constexpr DType f64 = DType::kF64;

std::size_t size_of(DType d);
std::string_view name(DType d);  // "f32", "i32", "bool", ...
// Floating-point dtypes are "inexact": they are what grad differentiates.
bool is_inexact(DType d);
// f16 and bf16: 16-bit floats that every backend stores as such and computes in
// f32, rounding each primitive's result once (docs/DTYPES.md).
bool is_16bit_float(DType d);
bool is_integer(DType d);  // i32, u32 (not bool)
bool is_signed(DType d);
std::ostream& operator<<(std::ostream& os, DType d);

// Maps a C++ element type to its dtype (bool, int32_t, uint32_t, float, double).
template <class T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct dtype_of<std::uint32_t> {
  static constexpr DType value = DType::kU32;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::kF64;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ element type of `d` (f16 and bf16 are
// not host-computable).
template <class F>
decltype(auto) visit_dtype(DType d, F&& f);

}  // namespace kiln

#include "kiln/runtime/dtype_inl.hpp"
