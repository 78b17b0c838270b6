// Shape: the extents of an array (row-major, contiguous), and the rules that only
// depend on shapes: element counts, strides, numpy broadcasting, axis normalisation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace kiln {

// Inline storage for up to 6 dims keeps eager dispatch free of heap traffic.
using Axes = absl::InlinedVector<std::int64_t, 6>;
// The extents, as Axes' storage with kiln's own type, so that
// `std::cout << shape` finds operator<< below (an alias of absl's type did not:
// argument-dependent lookup looked in absl). Converts from and to Axes.
class Shape : public Axes {
 public:
  using Axes::Axes;
  Shape() = default;
  Shape(const Axes& a) : Axes(a) {}  // NOLINT: implicit, as the alias was
  Shape(Axes&& a) : Axes(std::move(a)) {}  // NOLINT
};

// Unchecked: for shapes of arrays that exist (their shapes passed
// shape_size when they were made).
std::int64_t numel(const Shape& s);

// The element count and byte size of an array of shape `s` with
// `item_bytes`-byte elements, or why no such array can exist: a negative
// dimension, or a byte size past int64 (counted as numpy does: the non-zero
// dimensions times item_bytes must fit even when another dimension is 0, so
// reshaping or slicing a size-0 array cannot reach an overflowing count).
// Every shape that comes from a user or a file goes through this before
// anything is allocated: ops (detail::bind, Array), the .npy header and
// checkpoint manifest readers. Callers choose the error type.
struct ShapeSize {
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  std::string error;  // empty when the shape is valid
  bool ok() const { return error.empty(); }
};
ShapeSize shape_size(const Shape& s, std::size_t item_bytes);
// Throws ShapeError "[op] <shape_size's error>" for an invalid shape.
void check_shape(std::string_view op, const Shape& s, std::size_t item_bytes);
std::string to_string(const Shape& s);  // "(2, 3)", "()" for a scalar, "(5,)"
std::ostream& operator<<(std::ostream& os, const Shape& s);  // as to_string
Shape row_major_strides(const Shape& s);  // in elements

// numpy broadcasting of two shapes; throws ShapeError prefixed with `op`.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);

// Normalises a possibly negative axis into [0, ndim); throws ShapeError naming `op`.
std::int64_t normalize_axis(std::string_view op, std::int64_t axis,
                            std::int64_t ndim);
// Normalises, sorts and deduplicates-checks a list of axes (empty = no axes).
Axes normalize_axes(std::string_view op, std::span<const std::int64_t> axes,
                    std::int64_t ndim);

}  // namespace kiln
