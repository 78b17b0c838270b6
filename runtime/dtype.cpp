// DType facts.
#include "kiln/runtime/dtype.hpp"

namespace kiln {

std::size_t size_of(DType d) {
  switch (d) {
    case DType::kBool:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
  }
  return 0;
}

std::string_view name(DType d) {
  switch (d) {
    case DType::kBool:
      return "bool";
    case DType::kI32:
      return "i32";
    case DType::kU32:
      return "u32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
  }
  return "?";
}

bool is_inexact(DType d) {
  return is_16bit_float(d) || d == DType::kF32 || d == DType::kF64;
}
bool is_16bit_float(DType d) { return d == DType::kF16 || d == DType::kBF16; }
bool is_integer(DType d) { return d == DType::kI32 || d == DType::kU32; }
bool is_signed(DType d) { return d != DType::kU32 && d != DType::kBool; }

std::ostream& operator<<(std::ostream& os, DType d) { return os << name(d); }

}  // namespace kiln
