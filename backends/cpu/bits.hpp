// Helpers for CPU kernels that move elements without looking at their values
// (layout and gather primitives). Such a kernel only needs the element size, so
// it is instantiated once per size (1, 2, 4, 8 bytes) rather than once per
// dtype: bool travels as a byte, f32 as its 32 bits (bit-exact, NaN payloads
// included). Internal to the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {

// Calls f(U{}) with U the unsigned integer type of `size` bytes (1, 2, 4, 8).
template <class F>
decltype(auto) visit_size(std::size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    case 8:
      return f(std::uint64_t{});
    default:
      break;
  }
  throw Error(detail::str_cat("[cpu] no element mover for ", size, "-byte elements"));
}

// Calls f(U{}) with U the unsigned integer type of `dtype`'s element size.
template <class F>
decltype(auto) visit_element_size(DType dtype, F&& f) {
  switch (size_of(dtype)) {
    case 1:
    case 2:
    case 4:
    case 8:
      return visit_size(size_of(dtype), std::forward<F>(f));
    default:
      break;
  }
  throw DTypeError(
      detail::str_cat("[cpu] no element mover for dtype ", name(dtype)));
}

// An array of `shape` seen as (outer, n, inner) around `axis`: the kernels
// that walk one axis (scans, sorts, scatters) loop over outer and inner.
struct AxisRuns {
  std::size_t outer = 1, n = 1, inner = 1;
};
inline AxisRuns around_axis(const Shape& shape, std::size_t axis) {
  AxisRuns r;
  for (std::size_t d = 0; d < axis; ++d) r.outer *= static_cast<std::size_t>(shape[d]);
  r.n = static_cast<std::size_t>(shape[axis]);
  for (std::size_t d = axis + 1; d < shape.size(); ++d) r.inner *= static_cast<std::size_t>(shape[d]);
  return r;
}

// The host elements of a CPU array reinterpreted as U (see visit_element_size).
// Array::data<T>() would insist on the exact element type.
template <class U>
const U* host_elements(const Array& a) {
  return static_cast<const U*>(a.buffer()->host_data());
}

}  // namespace kiln::cpu
