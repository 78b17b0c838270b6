// Layout composites: stack, split, flip, tile, repeat, roll, pad, tril/triu,
// diagonal, meshgrid, linspace, eye. Each is written in the layout, indexing
// and elementwise ops (docs/PRIMITIVES.md, "Composites"): they trace,
// differentiate and run on every backend with no kernel of their own. Reversals
// and gathers (kiln's slice takes step > 0 only) are a take with an index
// array computed here on the host, where the shapes are known.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

void check_input(const char* op, const Array& a) { detail::check_not_none(op, a, "input"); }

// An i32 index array on `a`'s device (a constant of the program when tracing).
Array index_array(const Array& a, const std::vector<std::int32_t>& idx) {
  return to_device(Array::from_data<std::int32_t>(std::span<const std::int32_t>(idx),
                                                  Shape{static_cast<std::int64_t>(idx.size())}),
                   a.device());
}

void check_index_range(const char* op, const Array& a, std::int64_t n) {
  if (n > INT32_MAX) {
    throw ValueError(detail::str_cat("[", op, "] an axis of length ", n, " of shape ",
                                     to_string(a.shape()), " is too long for i32 indices"));
  }
}

// 0, 1, ..., n - 1 (i32) on a's device.
Array iota(const Array& a, std::int64_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(i);
  return index_array(a, v);
}

Array flatten(const Array& a) { return a.ndim() == 1 ? a : reshape(a, Shape{a.size()}); }

// The (rows, cols) position mask of the last two axes: col - row compared with k.
Array diagonal_mask(const char* op, const Array& a, std::int64_t k, bool lower) {
  check_input(op, a);
  if (a.ndim() < 2) {
    throw ShapeError(detail::str_cat("[", op, "] needs an array of rank >= 2, got shape ",
                                     to_string(a.shape())));
  }
  const std::int64_t rows = a.shape()[a.ndim() - 2];
  const std::int64_t cols = a.shape()[a.ndim() - 1];
  check_index_range(op, a, std::max(rows, cols));
  const Array r = reshape(iota(a, rows), Shape{rows, 1});
  const Array c = reshape(iota(a, cols), Shape{1, cols});
  // col - row <= k keeps the lower triangle; col - row >= k the upper one. k
  // is clamped so that the i32 scalar is representable.
  const double kk = static_cast<double>(std::clamp<std::int64_t>(k, -INT32_MAX, INT32_MAX));
  const Array diff = c - r;
  return lower ? diff <= kk : diff >= kk;
}

}  // namespace

Array stack(std::span<const Array> arrays, std::int64_t axis) {
  if (arrays.empty()) throw ValueError("[stack] needs at least one array");
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    detail::check_not_none("stack", arrays[i], detail::str_cat("array ", i));
  }
  const Shape& first = arrays[0].shape();
  const std::int64_t ax = normalize_axis("stack", axis, arrays[0].ndim() + 1);
  std::vector<Array> expanded;
  expanded.reserve(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].shape() != first) {
      throw ShapeError(detail::str_cat("[stack] array ", i, " has shape ",
                                       to_string(arrays[i].shape()), " but array 0 has shape ",
                                       to_string(first), ": all must have the same shape"));
    }
    if (arrays[i].dtype() != arrays[0].dtype()) {
      throw DTypeError(detail::str_cat("[stack] array ", i, " has dtype ", name(arrays[i].dtype()),
                                       " but array 0 has dtype ", name(arrays[0].dtype())));
    }
    expanded.push_back(expand_dims(arrays[i], ax));
  }
  if (expanded.size() == 1) return expanded[0];
  return concatenate(expanded, ax);
}

Array stack(std::initializer_list<Array> arrays, std::int64_t axis) {
  return stack(std::span<const Array>(arrays.begin(), arrays.size()), axis);
}

std::vector<Array> split(const Array& a, std::int64_t sections, std::int64_t axis) {
  check_input("split", a);
  const std::int64_t ax = normalize_axis("split", axis, a.ndim());
  const std::int64_t n = a.shape()[ax];
  if (sections <= 0) {
    throw ValueError(detail::str_cat("[split] the number of sections must be > 0, got ", sections));
  }
  if (n % sections != 0) {
    throw ValueError(detail::str_cat("[split] axis ", ax, " of shape ", to_string(a.shape()),
                                     " (length ", n, ") does not divide into ", sections,
                                     " equal sections; pass split indices instead"));
  }
  Shape indices;
  for (std::int64_t i = 1; i < sections; ++i) indices.push_back(i * (n / sections));
  return split(a, indices, ax);
}

std::vector<Array> split(const Array& a, const Shape& indices, std::int64_t axis) {
  check_input("split", a);
  const std::int64_t ax = normalize_axis("split", axis, a.ndim());
  const std::int64_t n = a.shape()[ax];
  std::vector<Array> out;
  out.reserve(indices.size() + 1);
  std::int64_t start = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    const std::int64_t stop = i < indices.size() ? indices[i] : n;
    out.push_back(slice_axis(a, ax, start, stop));
    start = stop;
  }
  return out;
}

std::vector<Array> split(const Array& a, std::initializer_list<std::int64_t> indices,
                         std::int64_t axis) {
  return split(a, Shape(indices), axis);
}

Array flip(const Array& a, AxisArg axes) {
  check_input("flip", a);
  Axes resolved;
  if (axes.all()) {
    for (std::int64_t d = 0; d < a.ndim(); ++d) resolved.push_back(d);
  } else {
    resolved = normalize_axes("flip", axes.axes(), a.ndim());
  }
  Array out = a;
  for (std::int64_t ax : resolved) {
    const std::int64_t n = a.shape()[ax];
    if (n <= 1) continue;
    check_index_range("flip", a, n);
    std::vector<std::int32_t> idx(n);
    for (std::int64_t i = 0; i < n; ++i) idx[i] = static_cast<std::int32_t>(n - 1 - i);
    out = take(out, index_array(a, idx), ax);
  }
  return out;
}

Array tile(const Array& a, const Shape& reps) {
  check_input("tile", a);
  for (std::int64_t r : reps) {
    if (r < 0) {
      throw ValueError(detail::str_cat("[tile] reps must be >= 0, got ", to_string(reps)));
    }
  }
  const std::size_t rank = std::max<std::size_t>(reps.size(), a.shape().size());
  Shape in(rank - a.shape().size(), 1);
  in.insert(in.end(), a.shape().begin(), a.shape().end());
  Shape r(rank - reps.size(), 1);
  r.insert(r.end(), reps.begin(), reps.end());
  // (1, s0, 1, s1, ...) broadcast to (r0, s0, r1, s1, ...), then merged pairwise.
  Shape interleaved, broadcast, out;
  for (std::size_t d = 0; d < rank; ++d) {
    interleaved.push_back(1);
    interleaved.push_back(in[d]);
    broadcast.push_back(r[d]);
    broadcast.push_back(in[d]);
    out.push_back(r[d] * in[d]);
  }
  return reshape(broadcast_to(reshape(a, interleaved), broadcast), out);
}

Array repeat(const Array& a, std::int64_t repeats, std::optional<std::int64_t> axis) {
  check_input("repeat", a);
  if (repeats < 0) {
    throw ValueError(detail::str_cat("[repeat] repeats must be >= 0, got ", repeats));
  }
  const Array x = axis ? a : flatten(a);
  const std::int64_t ax = normalize_axis("repeat", axis.value_or(0), x.ndim());
  // x[..., i, ...] -> (..., i, r, ...) broadcast, then the pair merged.
  Shape expanded = x.shape();
  expanded.insert(expanded.begin() + ax + 1, 1);
  Shape broadcast = expanded;
  broadcast[ax + 1] = repeats;
  Shape out = x.shape();
  out[ax] *= repeats;
  return reshape(broadcast_to(reshape(x, expanded), broadcast), out);
}

Array roll(const Array& a, std::int64_t shift, std::optional<std::int64_t> axis) {
  check_input("roll", a);
  if (!axis) {
    if (a.ndim() == 0) return a;
    return reshape(roll(flatten(a), shift, 0), a.shape());
  }
  const std::int64_t ax = normalize_axis("roll", *axis, a.ndim());
  const std::int64_t n = a.shape()[ax];
  if (n == 0) return a;
  const std::int64_t s = ((shift % n) + n) % n;
  if (s == 0) return a;
  return concatenate({slice_axis(a, ax, n - s, n), slice_axis(a, ax, 0, n - s)}, ax);
}

Array pad(const Array& a, const PadWidth& pad_width, std::string_view mode, double constant_value) {
  check_input("pad", a);
  enum class Mode { kConstant, kEdge, kReflect };
  Mode m;
  if (mode == "constant") {
    m = Mode::kConstant;
  } else if (mode == "edge") {
    m = Mode::kEdge;
  } else if (mode == "reflect") {
    m = Mode::kReflect;
  } else {
    throw ValueError(
        detail::str_cat("[pad] mode '", mode, "' is not supported; use constant, edge or reflect"));
  }
  if (m == Mode::kConstant) scalar_like(a, constant_value, "pad");  // representable?
  const std::int64_t rank = a.ndim();
  if (pad_width.size() != 1 && static_cast<std::int64_t>(pad_width.size()) != rank) {
    throw ShapeError(detail::str_cat(
        "[pad] pad_width has ", pad_width.size(), " entries for an array of rank ", rank,
        " (shape ", to_string(a.shape()), "): give one (before, after) per axis, or one for all"));
  }
  Array out = a;
  for (std::int64_t ax = 0; ax < rank; ++ax) {
    const auto [before, after] = pad_width.size() == 1 ? pad_width[0] : pad_width[ax];
    if (before < 0 || after < 0) {
      throw ValueError(detail::str_cat("[pad] pad widths must be >= 0, got (", before, ", ", after,
                                       ") for axis ", ax));
    }
    if (before == 0 && after == 0) continue;
    const std::int64_t n = a.shape()[ax];
    if (m == Mode::kConstant) {
      Shape side = out.shape();
      std::vector<Array> parts;
      side[ax] = before;
      if (before > 0) parts.push_back(full(side, constant_value, a.dtype(), a.device()));
      parts.push_back(out);
      side[ax] = after;
      if (after > 0) parts.push_back(full(side, constant_value, a.dtype(), a.device()));
      out = concatenate(parts, ax);
      continue;
    }
    if (n == 0) {
      throw ValueError(detail::str_cat("[pad] cannot extend the empty axis ", ax, " of shape ",
                                       to_string(a.shape()), " in mode '", mode,
                                       "'; only constant padding can"));
    }
    check_index_range("pad", a, n + before + after);
    // Gather: position i of the padded axis reads index[i] of the input.
    std::vector<std::int32_t> idx;
    const std::int64_t period = 2 * (n - 1);
    for (std::int64_t i = -before; i < n + after; ++i) {
      std::int64_t j;
      if (m == Mode::kEdge || n == 1) {
        j = std::clamp<std::int64_t>(i, 0, n - 1);
      } else {  // reflect about the first and last elements, repeatedly
        j = ((i % period) + period) % period;
        if (j >= n) j = period - j;
      }
      idx.push_back(static_cast<std::int32_t>(j));
    }
    out = take(out, index_array(a, idx), ax);
  }
  return out;
}

Array tril(const Array& a, std::int64_t k) {
  const Array mask = diagonal_mask("tril", a, k, true);
  return where(mask, a, scalar_like(a, 0.0, "tril"));
}

Array triu(const Array& a, std::int64_t k) {
  const Array mask = diagonal_mask("triu", a, k, false);
  return where(mask, a, scalar_like(a, 0.0, "triu"));
}

Array diagonal(const Array& a, std::int64_t offset, std::int64_t axis1, std::int64_t axis2) {
  check_input("diagonal", a);
  if (a.ndim() < 2) {
    throw ShapeError(detail::str_cat("[diagonal] needs an array of rank >= 2, got shape ",
                                     to_string(a.shape())));
  }
  const std::int64_t ax1 = normalize_axis("diagonal", axis1, a.ndim());
  const std::int64_t ax2 = normalize_axis("diagonal", axis2, a.ndim());
  if (ax1 == ax2) {
    throw ValueError(detail::str_cat("[diagonal] axis1 and axis2 are the same axis (", ax1,
                                     ") of shape ", to_string(a.shape())));
  }
  Axes perm;
  for (std::int64_t d = 0; d < a.ndim(); ++d) {
    if (d != ax1 && d != ax2) perm.push_back(d);
  }
  perm.push_back(ax1);
  perm.push_back(ax2);
  const Array t = transpose(a, perm);
  const std::int64_t rows = a.shape()[ax1];
  const std::int64_t cols = a.shape()[ax2];
  // Element i of the diagonal is (i, i + offset), or (i - offset, i) below it.
  const std::int64_t len = std::max<std::int64_t>(
      0, offset >= 0 ? std::min(rows, cols - offset) : std::min(rows + offset, cols));
  // In the flattened (rows * cols) plane the diagonal is a strided slice: it
  // starts at (0, offset) or (-offset, 0) and steps by cols + 1.
  const std::int64_t start = offset >= 0 ? offset : -offset * cols;
  const std::int64_t stop = len == 0 ? start : start + (len - 1) * (cols + 1) + 1;
  Shape merged(t.shape().begin(), t.shape().end() - 2);
  merged.push_back(rows * cols);
  return slice_axis(reshape(t, merged), -1, start, stop, cols + 1);
}

std::vector<Array> meshgrid(std::span<const Array> xs, std::string_view indexing) {
  if (indexing != "xy" && indexing != "ij") {
    throw ValueError(
        detail::str_cat("[meshgrid] indexing must be \"xy\" or \"ij\", got \"", indexing, "\""));
  }
  Shape shape;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    detail::check_not_none("meshgrid", xs[i], detail::str_cat("array ", i));
    if (xs[i].ndim() != 1) {
      throw ShapeError(detail::str_cat("[meshgrid] array ", i, " has shape ",
                                       to_string(xs[i].shape()), "; every input must be 1-D"));
    }
    shape.push_back(xs[i].shape()[0]);
  }
  const bool xy = indexing == "xy" && xs.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Array> out;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    std::size_t at = i;
    if (xy && i < 2) at = 1 - i;
    Shape col(xs.size(), 1);
    col[at] = shape[at];
    out.push_back(broadcast_to(reshape(xs[i], col), shape));
  }
  return out;
}

std::vector<Array> meshgrid(std::initializer_list<Array> xs, std::string_view indexing) {
  return meshgrid(std::span<const Array>(xs.begin(), xs.size()), indexing);
}

Array linspace(double start, double stop, std::int64_t num, bool endpoint, DType dtype) {
  if (num < 0) {
    throw ValueError(detail::str_cat("[linspace] num must be >= 0, got ", num));
  }
  if (dtype == DType::kBool) {
    throw DTypeError("[linspace] dtype bool is not numeric");
  }
  // Computed in f32 (f64 for f64) as start + i * step, then converted; the
  // endpoint is exactly `stop` (numpy does the same). Integer dtypes floor.
  const DType compute = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const std::int64_t div = endpoint ? num - 1 : num;
  const double step = div > 0 ? (stop - start) / static_cast<double>(div) : 0.0;
  Array i = arange(0.0, static_cast<double>(num), 1.0, compute);
  Array y = i * step + start;
  if (endpoint && num > 1) {
    y = where(i == static_cast<double>(num - 1), scalar_like(y, stop, "linspace"), y);
  }
  if (!is_inexact(dtype)) y = floor(y);
  return astype(y, dtype);
}

Array eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype) {
  if (m < 0) m = n;
  if (n < 0) {
    throw ValueError(detail::str_cat("[eye] n must be >= 0, got ", n));
  }
  if (n > INT32_MAX || m > INT32_MAX) {
    throw ValueError(detail::str_cat("[eye] (", n, ", ", m, ") is too large"));
  }
  const Array rows = reshape(arange(static_cast<double>(n)), Shape{n, 1});
  const Array cols = reshape(arange(static_cast<double>(m)), Shape{1, m});
  const double kk = static_cast<double>(std::clamp<std::int64_t>(k, -INT32_MAX, INT32_MAX));
  return astype(cols - rows == kk, dtype);
}

}  // namespace kiln
