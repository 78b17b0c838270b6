// Composite ops: written in other DSL ops, so they trace, differentiate and run
// on every backend with no kernel of their own, and a fusing backend compiles
// each into the kernel of its neighbours (tinygrad's lesson). Promote one to a
// primitive when a measurement says so (docs/PRIMITIVES.md, "Composites").
#include <limits>
#include <utility>

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
  // The larger plus log1p(exp(-|a - b|)), written per branch so that the
  // gradient at a tie is JAX's (1/2 each; max and abs would give 0 and 1),
  // each branch's exponent clamped to <= 0 (no inf, so no NaN in the
  // gradient of the branch not taken). Infinities of one sign: a + b.
  const Array delta = a - b;
  const Array zero = zeros_like(delta);
  const Array a_wins = delta >= zero;
  const Array stable = where(a_wins, a + log1p(exp(-where(a_wins, delta, zero))),
                             b + log1p(exp(where(a_wins, zero, delta))));
  return where(delta != delta, a + b, stable);
}

Array nan_to_num(const Array& a, double nan, std::optional<double> posinf,
                 std::optional<double> neginf) {
  detail::check_not_none("nan_to_num", a, "argument 1");
  if (!is_inexact(a.dtype())) return a;  // nothing to replace (numpy too)
  // bf16's largest finite value is 0x7f7f: (2 - 2^-7) * 2^127.
  const double largest = a.dtype() == DType::kF16    ? 65504.0
                         : a.dtype() == DType::kBF16 ? 3.3895313892515355e38
                         : a.dtype() == DType::kF32  ? std::numeric_limits<float>::max()
                                                     : std::numeric_limits<double>::max();
  const double inf = std::numeric_limits<double>::infinity();
  const Array big = scalar_like(a, posinf.value_or(largest), "nan_to_num");
  const Array low = scalar_like(a, neginf.value_or(-largest), "nan_to_num");
  return where(a != a, scalar_like(a, nan, "nan_to_num"),
               where(a == inf, big, where(a == -inf, low, a)));
}

namespace {

void check_divmod(std::string_view op, const Array& a, const Array& b) {
  detail::check_not_none(op, a, "argument 1");
  detail::check_not_none(op, b, "argument 2");
  if (a.dtype() != b.dtype()) {
    throw DTypeError(detail::str_cat("[", op, "] dtype mismatch: ", name(a.dtype()), " and ",
                                     name(b.dtype()), " (kiln does not promote; use astype)"));
  }
  if (a.dtype() == DType::kBool) {
    throw DTypeError(detail::str_cat("[", op, "] requires a numeric dtype, got bool; "
                                     "convert with astype(x, i32)"));
  }
  broadcast_shapes(op, a.shape(), b.shape());  // so that a mismatch names `op`
}

// numpy's npy_divmod for floats, with fmod(a, b) as a - trunc(a / b) * b (where
// the quotient truncates to 0, fmod is a itself: also right for infinite b).
std::pair<Array, Array> float_divmod(const Array& a, const Array& b) {
  const Array zero = scalar_like(a, 0.0, "floor_divide");
  const Array t = trunc(a / b);
  const Array fmod = where(t == zero, a, a - t * b);
  const Array div = (a - fmod) / b;
  // A nonzero remainder with the wrong sign moves one divisor down.
  const Array wrong_sign = (fmod != zero) & ((b < zero) != (fmod < zero));
  const Array mod = where(wrong_sign, fmod + b, fmod);
  const Array q = where(wrong_sign, div - 1.0, div);
  // div is an integer up to rounding: round it as numpy does.
  const Array fl = floor(q);
  Array floordiv = where(q - fl > 0.5, fl + 1.0, fl);
  floordiv = where(q == zero, a / b * zero, floordiv);  // signed zero of a / b
  // x // 0 is a / 0 (inf or NaN), as numpy.
  return {where(b == zero, a / b, floordiv), mod};
}

// Integers: kiln's divide truncates and gives 0 for x / 0; numpy gives 0 for
// both x // 0 and x % 0.
std::pair<Array, Array> int_divmod(const Array& a, const Array& b) {
  const Array zero = scalar_like(a, 0.0, "floor_divide");
  const Array q = a / b;
  const Array r = a - q * b;
  if (a.dtype() == DType::kU32) return {q, where(b == zero, zero, r)};
  const Array wrong_sign = (r != zero) & ((r < zero) != (b < zero));
  const Array by_zero = b == zero;
  return {where(by_zero, zero, where(wrong_sign, q - 1, q)),
          where(by_zero, zero, where(wrong_sign, r + b, r))};
}

std::pair<Array, Array> divmod(std::string_view op, const Array& a, const Array& b) {
  check_divmod(op, a, b);
  return is_inexact(a.dtype()) ? float_divmod(a, b) : int_divmod(a, b);
}

}  // namespace

Array floor_divide(const Array& a, const Array& b) { return divmod("floor_divide", a, b).first; }
Array mod(const Array& a, const Array& b) { return divmod("mod", a, b).second; }
Array remainder(const Array& a, const Array& b) { return divmod("remainder", a, b).second; }

Array rem(const Array& a, const Array& b) {
  check_divmod("rem", a, b);
  if (!is_inexact(a.dtype())) return a - (a / b) * b;  // a / 0 is 0; wraps at INT_MIN / -1
  const Array t = trunc(a / b);
  const Array zero = scalar_like(a, 0.0, "rem");
  // t == 0: a itself (also for infinite b); a - t * b keeps the dividend's sign
  // through zero results (-0 for negative a).
  const Array r = a - t * b;
  return where(t == zero, a, where(r == zero, a * zero, r));
}

Array shift_right_arithmetic(const Array& a, const Array& amount) {
  detail::check_not_none("shift_right_arithmetic", a, "argument 1");
  detail::check_not_none("shift_right_arithmetic", amount, "argument 2");
  if (a.dtype() == DType::kU32) {  // the bit pattern's sign, as XLA
    return bitcast(shift_right_arithmetic(bitcast(a, DType::kI32), bitcast(amount, DType::kI32)),
                   DType::kU32);
  }
  // Negative x: ~((~x) >>> n) fills with ones; an amount past 31 gives 0 >>> n = 0,
  // so all sign bits.
  const Array negative = a < scalar_like(a, 0.0, "shift_right_arithmetic");
  return where(negative, bitwise_not(shift_right_logical(bitwise_not(a), amount)),
               shift_right_logical(a, amount));
}

}  // namespace kiln
