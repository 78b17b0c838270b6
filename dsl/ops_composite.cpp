// Composite ops: written in other DSL ops, so they trace, differentiate and run
// on every backend with no kernel of their own, and a fusing backend compiles
// each into the kernel of its neighbours (tinygrad's lesson). Promote one to a
// primitive when a measurement says so (docs/ARCHITECTURE.md, "Primitives").
#include <limits>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

namespace {

void check_floating(std::string_view op, const Array& a) {
  detail::check_not_none(op, a, "argument 1");
  if (!is_inexact(a.dtype())) {
    throw DTypeError(detail::str_cat("[", op, "] requires a floating dtype, got ",
                                     name(a.dtype())));
  }
}

}  // namespace

Array reciprocal(const Array& a) {
  check_floating("reciprocal", a);
  return 1.0 / a;
}

Array clip(const Array& a, const Array& lo, const Array& hi) {
  return minimum(maximum(a, lo), hi);
}

Array clip(const Array& a, double lo, double hi) {
  if (lo > hi) {
    throw ValueError(detail::str_cat("[clip] lower bound ", lo, " is above the upper bound ", hi));
  }
  return minimum(maximum(a, lo), hi);
}

Array isnan(const Array& a) {
  check_floating("isnan", a);
  return a != a;
}

Array isinf(const Array& a) {
  check_floating("isinf", a);
  return abs(a) == std::numeric_limits<double>::infinity();
}

Array isfinite(const Array& a) {
  check_floating("isfinite", a);
  return abs(a) < std::numeric_limits<double>::infinity();  // NaN compares false
}

// jnp.logaddexp: max + log1p(exp(-|a - b|)); where a - b is NaN (equal
// infinities, or a NaN operand) a + b gives the right inf or NaN.
Array logaddexp(const Array& a, const Array& b) {
  check_floating("logaddexp", a);
  const Array delta = a - b;
  const Array stable = maximum(a, b) + log1p(exp(-abs(delta)));
  return where(delta != delta, a + b, stable);
}

}  // namespace kiln
