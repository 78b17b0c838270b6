// jax.lax.dynamic_slice / dynamic_update_slice: blocks at start positions that
// are arrays (so they may be traced: a KV cache, a sliding window, a position
// in a scan). Composites: each axis's positions are start + arange(size), a
// negative start wrapped once and then clamped so the block fits (JAX's rule,
// then XLA's: no start is out of range), and
// the block is a take per axis; the update scatters each axis's rows back. So
// both run on every backend and their gradients are take's and scatter's.
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

void check_starts(const char* op, const Array& a, std::span<const Array> starts) {
  detail::check_not_none(op, a, "the array input");
  if (static_cast<std::int64_t>(starts.size()) != a.ndim()) {
    throw ValueError(detail::str_cat("[", op, "] got ", starts.size(), " start indices for an array of rank ",
                                     a.ndim(), " (shape ", to_string(a.shape()), "): give one per axis"));
  }
  for (std::size_t d = 0; d < starts.size(); ++d) {
    detail::check_not_none(op, starts[d], "a start index");
    const Array& s = starts[d];
    if (s.ndim() != 0 || (s.dtype() != DType::kI32 && s.dtype() != DType::kU32)) {
      throw DTypeError(detail::str_cat("[", op, "] start index ", d, " must be a 0-d i32 or u32 array, got ",
                                       name(s.dtype()), to_string(s.shape())));
    }
  }
}

// The `size` positions along an axis of length n that a block starting at
// `start` covers: a negative start counts from the end once (start + n, as
// jax.lax.dynamic_slice does before XLA's clamp), then it is clamped to
// [0, n - size].
Array positions(const Array& start, std::int64_t size, std::int64_t n, Device device) {
  Array s = start.dtype() == DType::kI32 ? start : astype(minimum(start, scalar_like(start, n, "dynamic_slice")), DType::kI32);
  if (start.dtype() == DType::kI32) s = where(s < 0, s + static_cast<int>(n), s);
  s = minimum(maximum(s, 0), static_cast<int>(n - size));
  return s + arange(0, static_cast<double>(size), 1, DType::kI32, device);
}

Array update_from(const Array& a, const Array& update, std::span<const Array> starts, std::size_t axis) {
  if (axis == starts.size()) return update;
  const std::int64_t n = a.shape()[axis];
  const std::int64_t size = update.shape()[axis];
  const Array at = positions(starts[axis], size, n, a.device());
  const auto ax = static_cast<std::int64_t>(axis);
  return scatter(a, at, update_from(take(a, at, ax), update, starts, axis + 1), ax);
}

}  // namespace

Array dynamic_slice(const Array& a, std::span<const Array> starts, const Shape& sizes) {
  check_starts("dynamic_slice", a, starts);
  if (sizes.size() != starts.size()) {
    throw ValueError(detail::str_cat("[dynamic_slice] got ", sizes.size(), " sizes for an array of rank ",
                                     a.ndim(), ": give one per axis"));
  }
  Array out = a;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    const std::int64_t n = a.shape()[d];
    if (sizes[d] < 0 || sizes[d] > n) {
      throw ShapeError(detail::str_cat("[dynamic_slice] size ", sizes[d], " of axis ", d,
                                       " does not fit the array of shape ", to_string(a.shape())));
    }
    if (sizes[d] == n) continue;  // the whole axis, whatever the start
    out = take(out, positions(starts[d], sizes[d], n, a.device()), static_cast<std::int64_t>(d));
  }
  return out;
}

Array dynamic_slice(const Array& a, std::initializer_list<Array> starts, const Shape& sizes) {
  return dynamic_slice(a, std::span<const Array>(starts.begin(), starts.size()), sizes);
}

Array dynamic_update_slice(const Array& a, const Array& update, std::span<const Array> starts) {
  check_starts("dynamic_update_slice", a, starts);
  detail::check_not_none("dynamic_update_slice", update, "the update");
  if (update.dtype() != a.dtype()) {
    throw DTypeError(detail::str_cat("[dynamic_update_slice] the update is ", name(update.dtype()),
                                     " but the array is ", name(a.dtype())));
  }
  bool fits = update.ndim() == a.ndim();
  for (std::size_t d = 0; fits && d < a.shape().size(); ++d) fits = update.shape()[d] <= a.shape()[d];
  if (!fits) {
    throw ShapeError(detail::str_cat("[dynamic_update_slice] an update of shape ", to_string(update.shape()),
                                     " does not fit in the array of shape ", to_string(a.shape())));
  }
  if (update.size() == 0) return a;
  return update_from(a, update, starts, 0);
}

Array dynamic_update_slice(const Array& a, const Array& update, std::initializer_list<Array> starts) {
  return dynamic_update_slice(a, update, std::span<const Array>(starts.begin(), starts.size()));
}

}  // namespace kiln
