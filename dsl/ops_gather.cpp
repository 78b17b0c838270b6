// Gather with batch dimensions, tf.gather(params, indices, axis, batch_dims),
// as a composite: no primitive of its own, so it traces, fuses and
// differentiates through the ones it is written in.
//
// take(a, indices, axis, b): the first b axes of a and of indices are one
// batch (equal shapes); each batch element takes from its own slice of a:
//   out[n..., p..., i..., q...] = a[n..., p..., indices[n..., i...], q...]
// with n the b batch axes, p the axes of a before `axis`, i the remaining axes
// of indices and q those of a after `axis`.
//
// It is a take_along_axis over a itself: the indices, reshaped to a's rank
// (batch axes, ones over p, i flattened into the axis, ones over q),
// broadcast along p and q. take_along_axis checks each index against the
// length of a's axis, so an index past it is an IndexError (naming
// take_along_axis, `axis` and its length) rather than a read from the next
// batch element's slice, which flattening the batch into the axis and offsetting
// the indices would give. The gradient is take_along_axis's
// (scatter_add_along_axis, then a sum over the broadcast axes).
#include <cstdint>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Array take(const Array& a, const Array& indices, std::int64_t axis, std::int64_t batch_dims) {
  detail::check_not_none("take", a, "the array input");
  detail::check_not_none("take", indices, "the indices input");
  if (indices.dtype() != DType::kI32 && indices.dtype() != DType::kU32) {
    throw DTypeError(detail::str_cat("[take] indices must be i32 or u32, got ",
                                     name(indices.dtype()), " indices of shape ",
                                     to_string(indices.shape())));
  }
  const Shape& as = a.shape();
  const Shape& is = indices.shape();
  const auto a_rank = static_cast<std::int64_t>(as.size());
  const auto i_rank = static_cast<std::int64_t>(is.size());
  // Negative batch_dims count from the end of indices' axes, as tf.gather.
  const std::int64_t b = batch_dims < 0 ? batch_dims + i_rank : batch_dims;
  if (b < 0 || b > i_rank) {
    throw ShapeError(detail::str_cat("[take] batch_dims ", batch_dims,
                                     " is out of range for indices of shape ", to_string(is),
                                     " (rank ", i_rank, ")"));
  }
  if (b == 0) return take(a, indices, axis);
  if (axis < -a_rank || axis >= a_rank) {
    throw ShapeError(
        detail::str_cat("[take] axis ", axis, " is out of range for an array of rank ", a_rank));
  }
  const std::int64_t ax = axis < 0 ? axis + a_rank : axis;
  if (ax < b) {
    throw ShapeError(detail::str_cat("[take] axis ", axis, " must not be one of the ", b,
                                     " batch axes (batch_dims ", batch_dims,
                                     "): the axis taken from comes after them"));
  }
  for (std::int64_t d = 0; d < b; ++d) {
    if (as[static_cast<std::size_t>(d)] != is[static_cast<std::size_t>(d)]) {
      throw ShapeError(detail::str_cat(
          "[take] the first ", b, " axes (batch_dims) of the array of shape ", to_string(as),
          " and of the indices of shape ", to_string(is), " must be equal (axis ", d, ": ",
          as[static_cast<std::size_t>(d)], " vs ", is[static_cast<std::size_t>(d)], ")"));
    }
  }
  // indices as [batch..., 1 (p)..., i (flattened), 1 (q)...].
  std::int64_t picks = 1;
  for (std::int64_t d = b; d < i_rank; ++d) picks *= is[static_cast<std::size_t>(d)];
  Shape along(is.begin(), is.begin() + b);
  along.insert(along.end(), static_cast<std::size_t>(ax - b), 1);
  along.push_back(picks);
  along.insert(along.end(), static_cast<std::size_t>(a_rank - ax - 1), 1);
  const Array taken = take_along_axis(a, reshape(indices, along), ax);
  // [batch..., p..., i..., q...]
  Shape out(as.begin(), as.begin() + ax);
  out.insert(out.end(), is.begin() + b, is.end());
  out.insert(out.end(), as.begin() + ax + 1, as.end());
  return reshape(taken, out);
}

}  // namespace kiln
