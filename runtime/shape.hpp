// Shape: the extents of an array (row-major, contiguous), and the rules that only
// depend on shapes: element counts, strides, numpy broadcasting, axis normalisation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace kiln {

// Inline storage for up to 6 dims keeps eager dispatch free of heap traffic.
using Shape = absl::InlinedVector<std::int64_t, 6>;
using Axes = absl::InlinedVector<std::int64_t, 6>;

std::int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "(2, 3)", "()" for a scalar, "(5,)"
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
