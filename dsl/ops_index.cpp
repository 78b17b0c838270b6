// Indexing ops: take, take_along_axis, one_hot, and the scatters that are
// their transposes. The shape and dtype rules live
// here; index values are checked by the backend, which is the first to see
// them.
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

void check_inputs(const char* op, const Array& a, const Array& indices) {
  detail::check_not_none(op, a, "the array input");
  detail::check_not_none(op, indices, "the indices input");
}

void check_index_dtype(const char* op, const Array& indices) {
  if (indices.dtype() != DType::kI32 && indices.dtype() != DType::kU32) {
    throw DTypeError(detail::str_cat(
        "[", op, "] indices must be i32 or u32, got ", name(indices.dtype()),
        " indices of shape ", to_string(indices.shape())));
  }
}

}  // namespace

Array take(const Array& a, const Array& indices, std::int64_t axis) {
  check_inputs("take", a, indices);
  check_index_dtype("take", indices);
  const std::int64_t ax = normalize_axis("take", axis, a.ndim());
  const Shape& in = a.shape();
  Shape out(in.begin(), in.begin() + ax);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), in.begin() + ax + 1, in.end());
  const Array inputs[] = {a, indices};
  return detail::bind<Prim::kTake>(AxisParams{ax}, inputs, Aval{a.dtype(), std::move(out)});
}

Array take_along_axis(const Array& a, const Array& indices, std::int64_t axis) {
  check_inputs("take_along_axis", a, indices);
  check_index_dtype("take_along_axis", indices);
  const Shape& in = a.shape();
  const Shape& is = indices.shape();
  if (is.size() != in.size()) {
    throw ShapeError(detail::str_cat(
        "[take_along_axis] indices of shape ", to_string(is),
        " must have the same rank as the array of shape ", to_string(in)));
  }
  const std::int64_t ax = normalize_axis("take_along_axis", axis, a.ndim());
  // Non-axis dims broadcast (numpy pairs the indices with aranges over them).
  Shape out(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (static_cast<std::int64_t>(d) == ax || in[d] == is[d] || in[d] == 1) {
      out[d] = is[d];
    } else if (is[d] == 1) {
      out[d] = in[d];
    } else {
      throw ShapeError(
          detail::str_cat("[take_along_axis] indices of shape ", to_string(is),
                          " do not broadcast against the array of shape ",
                          to_string(in), " outside axis ", ax, " (dimension ",
                          d, ": ", is[d], " vs ", in[d], ")"));
    }
  }
  const Array inputs[] = {a, indices};
  return detail::bind<Prim::kTakeAlongAxis>(AxisParams{ax}, inputs,
                      Aval{a.dtype(), std::move(out)});
}

Array one_hot(const Array& indices, std::int64_t depth, DType dtype) {
  if (indices.is_null()) {
    detail::check_not_none("one_hot", indices, "indices input");
  }
  check_index_dtype("one_hot", indices);
  if (depth < 0) {
    throw ValueError(detail::str_cat("[one_hot] depth must be >= 0, got ",
                                     depth, " for indices of shape ",
                                     to_string(indices.shape())));
  }
  Shape out = indices.shape();
  out.push_back(depth);
  const OneHotParams p{static_cast<std::int64_t>(out.size()) - 1, depth, dtype};
  const Array inputs[] = {indices};
  return detail::bind<Prim::kOneHot>(p, inputs, Aval{dtype, std::move(out)});
}

namespace {

void check_updates(const char* op, const Array& a, const Array& updates,
                   const Shape& expected, const char* rule) {
  detail::check_not_none(op, updates, "the updates input");
  if (updates.dtype() != a.dtype()) {
    throw DTypeError(detail::str_cat("[", op, "] updates are ", name(updates.dtype()),
                                     " but the array is ", name(a.dtype())));
  }
  if (updates.shape() != expected) {
    throw ShapeError(detail::str_cat("[", op, "] updates of shape ", to_string(updates.shape()),
                                     " must have shape ", to_string(expected), " (", rule,
                                     ")"));
  }
}

void check_addable(const char* op, const Array& a) {
  if (a.dtype() == DType::kBool) {
    throw DTypeError(detail::str_cat("[", op, "] cannot add bool updates; use scatter to "
                                     "write them"));
  }
}

Array scatter_like_take(Prim p, const char* op, const Array& a, const Array& indices,
                        const Array& updates, std::int64_t axis) {
  check_inputs(op, a, indices);
  check_index_dtype(op, indices);
  const std::int64_t ax = normalize_axis(op, axis, a.ndim());
  const Shape& in = a.shape();
  Shape expected(in.begin(), in.begin() + ax);
  expected.insert(expected.end(), indices.shape().begin(), indices.shape().end());
  expected.insert(expected.end(), in.begin() + ax + 1, in.end());
  check_updates(op, a, updates, expected, "take's result shape for these indices");
  if (p != Prim::kScatter) check_addable(op, a);
  const Array inputs[] = {a, indices, updates};
  return detail::bind(p, AxisParams{ax}, inputs, a.aval());
}

}  // namespace

Array scatter_add(const Array& a, const Array& indices, const Array& updates,
                  std::int64_t axis) {
  return scatter_like_take(Prim::kScatterAdd, "scatter_add", a, indices, updates, axis);
}

Array scatter(const Array& a, const Array& indices, const Array& updates,
              std::int64_t axis) {
  return scatter_like_take(Prim::kScatter, "scatter", a, indices, updates, axis);
}

Array scatter_add_along_axis(const Array& a, const Array& indices, const Array& updates,
                             std::int64_t axis) {
  const char* op = "scatter_add_along_axis";
  check_inputs(op, a, indices);
  check_index_dtype(op, indices);
  const std::int64_t ax = normalize_axis(op, axis, a.ndim());
  const Shape& in = a.shape();
  const Shape& is = indices.shape();
  bool ok = is.size() == in.size();
  for (std::size_t d = 0; ok && d < in.size(); ++d) {
    ok = static_cast<std::int64_t>(d) == ax || is[d] == in[d];
  }
  if (!ok) {
    throw ShapeError(detail::str_cat("[", op, "] indices of shape ", to_string(is),
                                     " must have the shape of the array ", to_string(in),
                                     " except along axis ", ax));
  }
  check_updates(op, a, updates, is, "the indices' shape");
  check_addable(op, a);
  const Array inputs[] = {a, indices, updates};
  return detail::bind<Prim::kScatterAddAlongAxis>(AxisParams{ax}, inputs, a.aval());
}

}  // namespace kiln
