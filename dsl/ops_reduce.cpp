// Reductions: sum/max/min over axes, mean (sum divided by the count), and
// argmax/argmin along one axis or over the flattened array. The rules (which
// dtypes, what an empty reduction gives) are in docs/DTYPES.md.
#include <limits>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

namespace detail {

Axes resolve_axes(std::string_view op, const Array& a, const AxisArg& axes) {
  if (!axes.all()) return normalize_axes(op, axes.axes(), a.ndim());
  Axes all(static_cast<std::size_t>(a.ndim()));
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<std::int64_t>(i);
  return all;
}

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims) {
  Shape out;
  for (std::size_t i = 0, k = 0; i < shape.size(); ++i) {
    const bool reduced =
        k < axes.size() && axes[k] == static_cast<std::int64_t>(i);
    if (reduced) ++k;
    if (!reduced) {
      out.push_back(shape[i]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

}  // namespace detail

namespace {

using detail::reduced_shape;
using detail::resolve_axes;

void check_present(std::string_view op, const Array& a) {
  detail::check_not_none(op, a, "argument 1");
}


// max/min/argmax/argmin have no identity, so every output element needs at
// least one input element.
void check_not_empty(std::string_view op, const Array& a, const Axes& axes) {
  for (auto ax : axes) {
    if (a.shape()[static_cast<std::size_t>(ax)] == 0) {
      throw ShapeError(detail::str_cat(
          "[", op, "] cannot reduce over axis ", ax, " of shape ",
          to_string(a.shape()), ": it is empty and ", op, " has no identity"));
    }
  }
}

Array reduce(Prim p, const Array& a, const AxisArg& axis_arg, bool keepdims) {
  const std::string_view op = name(p);
  check_present(op, a);
  if ((p == Prim::kSum || p == Prim::kProd) && a.dtype() == DType::kBool) {
    throw DTypeError(detail::str_cat(
        "[", op, "] requires a numeric dtype, got bool for an operand of shape ",
        to_string(a.shape()),
        "; to count true values use sum(astype(x, i32))"));
  }
  ReduceParams params{resolve_axes(op, a, axis_arg), keepdims};
  if (p != Prim::kSum && p != Prim::kProd) check_not_empty(op, a, params.axes);
  Shape shape = reduced_shape(a.shape(), params.axes, keepdims);
  return detail::bind(p, params, std::span<const Array>(&a, 1),
                      Aval{a.dtype(), std::move(shape)});
}

Array arg_reduce(Prim p, const Array& a, std::int64_t axis, bool keepdims) {
  const std::string_view op = name(p);
  const ArgReduceParams params{normalize_axis(op, axis, a.ndim()), keepdims};
  check_not_empty(op, a, Axes{params.axis});
  if (a.shape()[static_cast<std::size_t>(params.axis)] >
      std::numeric_limits<std::int32_t>::max()) {
    throw ValueError(detail::str_cat("[", op, "] axis ", axis, " of shape ",
                                     to_string(a.shape()),
                                     " is too long for i32 indices"));
  }
  Shape shape = reduced_shape(a.shape(), Axes{params.axis}, keepdims);
  return detail::bind(p, params, std::span<const Array>(&a, 1),
                      Aval{DType::kI32, std::move(shape)});
}

// Without an axis: the index into the flattened array.
Array arg_reduce_flat(Prim p, const Array& a) {
  check_present(name(p), a);
  if (a.size() == 0) {
    throw ShapeError(detail::str_cat(
        "[", name(p), "] of an empty array (shape ", to_string(a.shape()),
        ") is undefined: there is no element"));
  }
  return arg_reduce(p, a.ndim() == 1 ? a : reshape(a, Shape{a.size()}), 0,
                    false);
}

}  // namespace

namespace {

Array scan(Prim p, const Array& a, std::int64_t axis, bool reverse) {
  check_present(name(p), a);
  const ScanParams params{normalize_axis(name(p), axis, a.ndim()), reverse};
  const Array x = a.dtype() == DType::kBool ? astype(a, DType::kI32) : a;
  return detail::bind(p, params, std::span<const Array>(&x, 1), x.aval());
}

Array flat(const Array& a, std::string_view op) {
  check_present(op, a);
  return a.ndim() == 1 ? a : reshape(a, Shape{a.size()});
}

}  // namespace

Array cumsum(const Array& a, std::int64_t axis, bool reverse) {
  return scan(Prim::kCumsum, a, axis, reverse);
}
Array cumsum(const Array& a) { return cumsum(flat(a, "cumsum"), 0); }
Array cumprod(const Array& a, std::int64_t axis, bool reverse) {
  return scan(Prim::kCumprod, a, axis, reverse);
}
Array cumprod(const Array& a) { return cumprod(flat(a, "cumprod"), 0); }

Array sum(const Array& a, AxisArg axes, bool keepdims) {
  return reduce(Prim::kSum, a, axes, keepdims);
}
Array prod(const Array& a, AxisArg axes, bool keepdims) {
  return reduce(Prim::kProd, a, axes, keepdims);
}
Array max(const Array& a, AxisArg axes, bool keepdims) {
  return reduce(Prim::kMax, a, axes, keepdims);
}
Array min(const Array& a, AxisArg axes, bool keepdims) {
  return reduce(Prim::kMin, a, axes, keepdims);
}

Array mean(const Array& a, AxisArg axes, bool keepdims) {
  check_present("mean", a);
  if (!is_inexact(a.dtype())) {
    throw DTypeError(
        detail::str_cat("[mean] requires a floating dtype, got ",
                        name(a.dtype()), " for an operand of shape ",
                        to_string(a.shape()), "; convert with astype(x, f32)"));
  }
  std::int64_t count = 1;
  for (auto ax : resolve_axes("mean", a, axes)) {
    count *= a.shape()[static_cast<std::size_t>(ax)];
  }
  // An empty reduction divides 0 by 0: NaN, as numpy.
  const Array total = sum(a, axes, keepdims);
  return divide(total, scalar_like(total, static_cast<double>(count), "mean"));
}

Array argmax(const Array& a) { return arg_reduce_flat(Prim::kArgmax, a); }
Array argmin(const Array& a) { return arg_reduce_flat(Prim::kArgmin, a); }
Array argmax(const Array& a, std::int64_t axis, bool keepdims) {
  check_present("argmax", a);
  return arg_reduce(Prim::kArgmax, a, axis, keepdims);
}
Array argmin(const Array& a, std::int64_t axis, bool keepdims) {
  check_present("argmin", a);
  return arg_reduce(Prim::kArgmin, a, axis, keepdims);
}

}  // namespace kiln
