// Argument checks shared by the op wrappers in dsl/. Internal: not installed.
#pragma once

#include <string_view>

#include "kiln/runtime/array.hpp"

namespace kiln::detail {

// Throws ValueError "[op] <which> is None (a null Array; ...)" when `a` is null;
// `which` names the argument as the op's docs do ("argument 2", "the indices
// input", "array 3").
void check_not_none(std::string_view op, const Array& a, std::string_view which);

}  // namespace kiln::detail
