// Argument checks shared by the op wrappers in dsl/. Internal: not installed.
#pragma once

#include <string_view>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/array.hpp"

namespace kiln::detail {

// Throws ValueError "[op] <which> is None (a null Array; ...)" when `a` is null;
// `which` names the argument as the op's docs do ("argument 2", "the indices
// input", "array 3").
void check_not_none(std::string_view op, const Array& a, std::string_view which);

// The axes a reduction named by `axes` covers, normalised and sorted (every
// axis when it names none); errors name `op`. Defined in ops_reduce.cpp.
Axes resolve_axes(std::string_view op, const Array& a, const AxisArg& axes);
// The result shape of reducing `axes` (sorted) of `shape`, with keepdims.
Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims);

}  // namespace kiln::detail
