// Layout ops: reshape, transpose/permute, broadcast_to, expand_dims, squeeze,
// concatenate, slice. Each resolves its result shape here (the primitive's
// params carry it fully resolved: no -1, no negative axes, clamped slice
// bounds), so a backend never repeats a shape rule. expand_dims, squeeze and
// permute are composites over the reshape and transpose primitives.
#include <algorithm>
#include <vector>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

void check_not_null(const char* op, const Array& a) {
  detail::check_not_none(op, a, "input");
}

Array bind_unary(Prim p, const Params& params, const Array& a, Shape out) {
  const Array inputs[] = {a};
  return detail::bind(p, params, inputs, Aval{a.dtype(), std::move(out)});
}

// reshape's rule, shared with the composites so their errors name themselves.
Array reshape_as(const char* op, const Array& a, const Shape& shape) {
  check_not_null(op, a);
  Shape out = shape;
  std::int64_t known = 1;
  std::size_t inferred = out.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1 && inferred == out.size()) {
      inferred = i;
    } else if (out[i] < 0) {
      throw ShapeError(detail::str_cat(
          "[", op, "] cannot reshape ", to_string(a.shape()), " into ",
          to_string(shape), ": ",
          out[i] == -1 ? "only one dimension can be -1"
                       : "dimensions must be >= 0 (or -1 to infer one)"));
    } else {
      known *= out[i];
    }
  }
  if (inferred != out.size()) {
    if (known == 0) {  // numpy: any size fits a zero-size remainder
      throw ShapeError(detail::str_cat(
          "[", op, "] cannot infer the -1 in ", to_string(shape), " for ",
          to_string(a.shape()), ": the other dimensions have size 0"));
    }
    out[inferred] = a.size() / known;
  }
  if (numel(out) != a.size()) {
    throw ShapeError(detail::str_cat("[", op, "] cannot reshape ",
                                     to_string(a.shape()), " (", a.size(),
                                     " elements) into ", to_string(shape)));
  }
  if (out == a.shape()) return a;  // nothing to do (and nothing to record)
  return bind_unary(Prim::kReshape, ShapeParams{out}, a, out);
}

Array transpose_as(const char* op, const Array& a, const Axes& perm) {
  check_not_null(op, a);
  const std::int64_t rank = a.ndim();
  Axes axes;
  for (auto ax : perm) axes.push_back(normalize_axis(op, ax, rank));
  Axes sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<std::int64_t>(axes.size()) == rank;
  for (std::size_t i = 0; ok && i < sorted.size(); ++i) {
    ok = sorted[i] == static_cast<std::int64_t>(i);
  }
  if (!ok) {
    throw ShapeError(detail::str_cat(
        "[", op, "] permutation ", to_string(perm), " is not a permutation of ",
        rank, " axes (array of shape ", to_string(a.shape()), ")"));
  }
  bool identity = true;
  for (std::size_t i = 0; i < axes.size(); ++i) identity = identity && axes[i] == static_cast<std::int64_t>(i);
  if (identity) return a;
  Shape out;
  for (auto ax : axes) out.push_back(a.shape()[ax]);
  // Built in one expression: GCC 12 at -O1 with the sanitizers warned that a
  // default-constructed InlinedVector's storage "may be used uninitialized" when
  // moved over.
  return bind_unary(Prim::kTranspose, TransposeParams{std::move(axes)}, a, std::move(out));
}

// Python slice bound semantics for a positive step: negative counts from the
// end, then clamp into [0, n].
std::int64_t clamp_bound(std::int64_t i, std::int64_t n) {
  if (i < 0) i += n;
  return std::clamp<std::int64_t>(i, 0, n);
}

}  // namespace

Array reshape(const Array& a, const Shape& shape) {
  return reshape_as("reshape", a, shape);
}

Array transpose(const Array& a) {
  check_not_null("transpose", a);
  Axes perm;
  for (std::int64_t i = a.ndim(); i-- > 0;) perm.push_back(i);
  return transpose_as("transpose", a, perm);
}

Array transpose(const Array& a, const Axes& perm) {
  return transpose_as("transpose", a, perm);
}

Array permute(const Array& a, const Axes& perm) {
  return transpose_as("permute", a, perm);
}

Array broadcast_to(const Array& a, const Shape& shape) {
  check_not_null("broadcast_to", a);
  const Shape& in = a.shape();
  const std::size_t lead = shape.size() - std::min(shape.size(), in.size());
  bool ok = in.size() <= shape.size();
  for (std::size_t i = 0; ok && i < shape.size(); ++i) {
    ok = shape[i] >= 0 &&
         (i < lead || in[i - lead] == shape[i] || in[i - lead] == 1);
  }
  if (!ok) {
    throw ShapeError(detail::str_cat(
        "[broadcast_to] cannot broadcast shape ", to_string(in), " to shape ",
        to_string(shape),
        ": only size-1 dimensions and missing leading dimensions can grow"));
  }
  return bind_unary(Prim::kBroadcastTo, ShapeParams{shape}, a, shape);
}

Array expand_dims(const Array& a, std::int64_t axis) {
  check_not_null("expand_dims", a);
  const std::int64_t rank = a.ndim() + 1;  // axis counts in the result
  if (axis < -rank || axis >= rank) {
    throw ShapeError(detail::str_cat(
        "[expand_dims] axis ", axis,
        " is out of range for expanding an array of shape ",
        to_string(a.shape()), " (valid: ", -rank, " to ", rank - 1, ")"));
  }
  if (axis < 0) axis += rank;
  Shape out = a.shape();
  out.insert(out.begin() + axis, 1);
  return reshape_as("expand_dims", a, out);
}

Array squeeze(const Array& a, AxisArg axes) {
  check_not_null("squeeze", a);
  const Shape& in = a.shape();
  std::vector<bool> drop(in.size(), false);
  if (axes.all()) {
    for (std::size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  } else {
    for (auto ax : normalize_axes("squeeze", axes.axes(), a.ndim())) {
      if (in[ax] != 1) {
        throw ShapeError(detail::str_cat("[squeeze] cannot squeeze axis ", ax,
                                         " of shape ", to_string(in),
                                         ": its size is ", in[ax], ", not 1"));
      }
      drop[ax] = true;
    }
  }
  Shape out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) out.push_back(in[i]);
  }
  return reshape_as("squeeze", a, out);
}

Array concatenate(std::span<const Array> arrays, std::int64_t axis) {
  if (arrays.empty()) {
    throw ValueError("[concatenate] needs at least one array");
  }
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].is_null()) {
      detail::check_not_none("concatenate", arrays[i], detail::str_cat("array ", i));
    }
  }
  const Array& first = arrays[0];
  if (first.ndim() == 0) {
    throw ShapeError(
        "[concatenate] zero-dimensional arrays cannot be concatenated");
  }
  const std::int64_t ax = normalize_axis("concatenate", axis, first.ndim());
  Shape out = first.shape();
  out[ax] = 0;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const Array& x = arrays[i];
    if (x.dtype() != first.dtype()) {
      throw DTypeError(detail::str_cat(
          "[concatenate] array ", i, " has dtype ", name(x.dtype()),
          " but array 0 has dtype ", name(first.dtype())));
    }
    bool ok = x.ndim() == first.ndim();
    for (std::int64_t d = 0; ok && d < first.ndim(); ++d) {
      ok = d == ax || x.shape()[d] == first.shape()[d];
    }
    if (!ok) {
      throw ShapeError(detail::str_cat(
          "[concatenate] array ", i, " has shape ", to_string(x.shape()),
          " but array 0 has shape ", to_string(first.shape()),
          ": all dimensions except axis ", ax, " must match"));
    }
    out[ax] += x.shape()[ax];
  }
  return detail::bind<Prim::kConcatenate>(AxisParams{ax}, arrays, Aval{first.dtype(), out});
}

Array concatenate(std::initializer_list<Array> arrays, std::int64_t axis) {
  return concatenate(std::span<const Array>(arrays.begin(), arrays.size()),
                     axis);
}

Array slice_axis(const Array& a, std::int64_t axis, std::int64_t start,
            std::int64_t stop, std::int64_t step) {
  check_not_null("slice", a);
  const std::int64_t ax = normalize_axis("slice", axis, a.ndim());
  Shape starts(static_cast<std::size_t>(ax) + 1, 0);
  Shape stops(a.shape().begin(), a.shape().begin() + ax + 1);
  Shape steps(starts.size(), 1);
  starts[ax] = start;
  stops[ax] = stop;
  steps[ax] = step;
  return slice(a, starts, stops, steps);
}

Array slice(const Array& a, const Shape& starts, const Shape& stops,
            const Shape& steps) {
  check_not_null("slice", a);
  if (starts.size() != stops.size() ||
      (!steps.empty() && steps.size() != starts.size())) {
    throw ValueError(
        detail::str_cat("[slice] starts ", to_string(starts), ", stops ",
                        to_string(stops), " and steps ", to_string(steps),
                        " must have the same length (steps may be empty)"));
  }
  const Shape& in = a.shape();
  if (starts.size() > in.size()) {
    throw ShapeError(detail::str_cat("[slice] ", starts.size(),
                                     " axes given for an array of shape ",
                                     to_string(in)));
  }
  SliceParams p{Shape(in.size(), 0), Shape(in.size(), 1), in};
  for (std::size_t d = 0; d < starts.size(); ++d) {
    const std::int64_t step = steps.empty() ? 1 : steps[d];
    if (step <= 0) {
      throw ValueError(detail::str_cat("[slice] step must be positive, got ",
                                       step, " for axis ", d, " of shape ",
                                       to_string(in)));
    }
    const std::int64_t lo = clamp_bound(starts[d], in[d]);
    const std::int64_t hi = clamp_bound(stops[d], in[d]);
    p.shape[d] = hi > lo ? (hi - lo + step - 1) / step : 0;
    // An empty extent's start and step are irrelevant; canonical values keep
    // the params of equal slices equal.
    p.starts[d] = p.shape[d] == 0 ? 0 : lo;
    p.steps[d] = p.shape[d] == 0 ? 1 : step;
  }
  Shape out = p.shape;
  return bind_unary(Prim::kSlice, p, a, std::move(out));
}

}  // namespace kiln
