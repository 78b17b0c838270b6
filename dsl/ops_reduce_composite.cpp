// Reduction composites: logsumexp, var/std, any/all, count_nonzero, norm, written in
// the reduction and elementwise ops (docs/PRIMITIVES.md, "Composites"). A
// fusing backend computes each elementwise body as the prologue of its
// reduction kernel.
#include <cmath>
#include <limits>

#include "kiln/dsl/autodiff.hpp"
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

void check_floating(std::string_view op, const Array& a) {
  detail::check_not_none(op, a, "argument 1");
  if (!is_inexact(a.dtype())) {
    throw DTypeError(detail::str_cat("[", op, "] requires a floating dtype, got ", name(a.dtype()),
                                     " for an operand of shape ", to_string(a.shape()),
                                     "; convert with astype(x, f32)"));
  }
}

std::int64_t reduced_count(const Array& a, const Axes& axes) {
  std::int64_t n = 1;
  for (std::int64_t ax : axes) n *= a.shape()[static_cast<std::size_t>(ax)];
  return n;
}

using detail::reduced_shape;
using detail::resolve_axes;

// The i32 count of nonzero elements (NaN is nonzero, as in numpy).
Array nonzero_count(std::string_view op, const Array& a, const AxisArg& axes, bool keepdims) {
  detail::check_not_none(op, a, "argument 1");
  resolve_axes(op, a, axes);  // axis errors name this op, not sum
  return sum(astype(a != scalar_like(a, 0.0, "count_nonzero"), i32), axes, keepdims);
}

}  // namespace

Array logsumexp(const Array& a, AxisArg axes, bool keepdims) {
  check_floating("logsumexp", a);
  const Axes ax = resolve_axes("logsumexp", a, axes);
  if (reduced_count(a, ax) == 0) {  // log(0); max() has no identity
    return full(reduced_shape(a.shape(), ax, keepdims), -std::numeric_limits<double>::infinity(),
                a.dtype(), a.device());
  }
  // Shifted by the max so exp cannot overflow; an infinite (or NaN) max shifts
  // by 0 instead, so that rows of -inf give log(0) = -inf rather than
  // -inf - -inf = NaN. The shift is a constant for the gradient (softmax).
  const Array m = max(a, ax, true);
  const Array shift = stop_gradient(where(isfinite(m), m, scalar_like(m, 0.0, "logsumexp")));
  const Array out = log(sum(exp(a - shift), ax, true)) + shift;
  return keepdims ? out : reshape(out, reduced_shape(a.shape(), ax, false));
}

Array var(const Array& a, AxisArg axes, std::int64_t ddof, bool keepdims) {
  check_floating("var", a);
  const Axes ax = resolve_axes("var", a, axes);
  const std::int64_t n = reduced_count(a, ax);
  const Array centered = a - mean(a, ax, true);
  // numpy divides by max(N - ddof, 0): 0 gives inf or NaN, as numpy.
  const double divisor = static_cast<double>(std::max<std::int64_t>(n - ddof, 0));
  const Array total = sum(centered * centered, ax, keepdims);
  return total / scalar_like(total, divisor, "var");
}

Array std(const Array& a, AxisArg axes, std::int64_t ddof, bool keepdims) {
  check_floating("std", a);
  return sqrt(var(a, std::move(axes), ddof, keepdims));
}

Array any(const Array& a, AxisArg axes, bool keepdims) {
  // != 0 rather than > 0: a count can only wrap to 0 at a multiple of 2^32.
  const Array count = nonzero_count("any", a, axes, keepdims);
  return count != scalar_like(count, 0.0, "any");
}

Array all(const Array& a, AxisArg axes, bool keepdims) {
  detail::check_not_none("all", a, "argument 1");
  resolve_axes("all", a, axes);
  const Array zeros_found = sum(astype(a == scalar_like(a, 0.0, "all"), i32), axes, keepdims);
  return zeros_found == scalar_like(zeros_found, 0.0, "all");
}

Array count_nonzero(const Array& a, AxisArg axes, bool keepdims) {
  return nonzero_count("count_nonzero", a, axes, keepdims);
}

Array norm(const Array& a, double ord, AxisArg axes, bool keepdims) {
  check_floating("norm", a);
  if (std::isnan(ord)) throw ValueError("[norm] ord is NaN; give 2, 1, inf, -inf, 0 or another number");
  const Axes ax = resolve_axes("norm", a, axes);
  if (ord == 2.0) return sqrt(sum(a * a, ax, keepdims));
  if (ord == 0.0) return sum(astype(a != scalar_like(a, 0.0, "norm"), a.dtype()), ax, keepdims);
  const Array m = abs(a);
  if (ord == 1.0) return sum(m, ax, keepdims);
  if (std::isinf(ord) && ord > 0) {  // jnp's amax(|x|, initial=0): a tie with 0 splits with it
    const Array top = max(m, ax, keepdims);
    return maximum(top, scalar_like(top, 0.0, "norm"));
  }
  if (std::isinf(ord)) return min(m, ax, keepdims);
  const Array p = scalar_like(m, ord, "norm");
  return power(sum(power(m, p), ax, keepdims), scalar_like(m, 1.0 / ord, "norm"));
}

}  // namespace kiln
