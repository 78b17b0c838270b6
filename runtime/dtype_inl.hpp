// Inline implementation of visit_dtype (kept out of dtype.hpp so that reads well).
#pragma once

#include <string>

#include "kiln/runtime/dtype.hpp"  // which includes this file at its end
#include "kiln/runtime/error.hpp"

namespace kiln {

template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::kBool:
      return f(bool{});
    case DType::kI32:
      return f(std::int32_t{});
    case DType::kU32:
      return f(std::uint32_t{});
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    case DType::kF16:
    case DType::kBF16:
      break;
  }
  throw DTypeError(std::string("[dtype] ") + std::string(name(d)) +
                   " has no host element type; astype to f32 first");
}

}  // namespace kiln
