// Sorting: argsort is the primitive (stable, NaN largest, ties in index
// order); sort and top_k are gathers by its result, so their gradients are
// take_along_axis's (a scatter_add back to where each value came from).
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Array argsort(const Array& a, std::int64_t axis, bool descending) {
  detail::check_not_none("argsort", a, "the array input");
  if (a.ndim() == 0) {
    throw ShapeError("[argsort] needs an array of rank >= 1, got a 0-d array");
  }
  const SortParams p{normalize_axis("argsort", axis, a.ndim()), descending};
  if (a.shape()[static_cast<std::size_t>(p.axis)] > (std::int64_t{1} << 30)) {
    throw ValueError(detail::str_cat("[argsort] axis ", axis, " of shape ", to_string(a.shape()),
                                     " is longer than 2^30 elements"));
  }
  const Array inputs[] = {a};
  return detail::bind<Prim::kArgsort>(p, inputs, Aval{DType::kI32, a.shape()});
}

Array sort(const Array& a, std::int64_t axis, bool descending) {
  detail::check_not_none("sort", a, "the array input");
  if (a.ndim() == 0) throw ShapeError("[sort] needs an array of rank >= 1, got a 0-d array");
  return take_along_axis(a, argsort(a, axis, descending), axis);
}

std::pair<Array, Array> top_k(const Array& a, std::int64_t k) {
  detail::check_not_none("top_k", a, "the array input");
  if (a.ndim() == 0) throw ShapeError("[top_k] needs an array of rank >= 1, got a 0-d array");
  const std::int64_t n = a.shape().back();
  if (k < 0 || k > n) {
    throw ValueError(detail::str_cat("[top_k] k = ", k, " is not in [0, ", n,
                                     "] for an array of shape ", to_string(a.shape())));
  }
  Array idx = slice_axis(argsort(a, -1, true), -1, 0, k);
  return {take_along_axis(a, idx, -1), idx};
}

}  // namespace kiln
