// Shape rules shared by every op.
#include "kiln/runtime/shape.hpp"

#include <algorithm>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

ShapeSize shape_size(const Shape& s, std::size_t item_bytes) {
  ShapeSize out;
  // The non-zero dimensions' product times the element size must fit.
  const auto item = static_cast<std::int64_t>(std::max<std::size_t>(item_bytes, 1));
  std::int64_t bytes = item;
  bool zero = false;
  for (auto d : s) {
    if (d < 0) {
      out.error = detail::str_cat("negative dimension in shape ", to_string(s));
      return out;
    }
    if (d == 0) {
      zero = true;
    } else if (__builtin_mul_overflow(bytes, d, &bytes)) {
      out.error = detail::str_cat("shape ", to_string(s), " is too large (",
                                  item, "-byte elements): its size in bytes ",
                                  "overflows a signed 64-bit count");
      return out;
    }
  }
  out.elements = zero ? 0 : bytes / item;
  out.bytes = out.elements * static_cast<std::int64_t>(item_bytes);
  return out;
}

void check_shape(std::string_view op, const Shape& s, std::size_t item_bytes) {
  ShapeSize size = shape_size(s, item_bytes);
  if (!size.ok()) throw ShapeError(detail::str_cat("[", op, "] ", size.error));
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << to_string(s); }

std::string to_string(const Shape& s) {
  if (s.size() == 1) return detail::str_cat("(", s[0], ",)");
  return detail::str_cat("(", detail::join(s, ", "), ")");
}

Shape row_major_strides(const Shape& s) {
  Shape st(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      throw ShapeError(detail::str_cat("[", op, "] shapes ", to_string(a), " and ",
                                    to_string(b),
                                    " cannot be broadcast together (dimension ",
                                    i, " from the left of the result: ", da,
                                    " vs ", db, ")"));
    }
  }
  return out;
}

std::int64_t normalize_axis(std::string_view op, std::int64_t axis,
                            std::int64_t ndim) {
  if (axis < -ndim || axis >= ndim) {
    throw ShapeError(detail::str_cat("[", op, "] axis ", axis,
                                  " is out of range for an array of rank ",
                                  ndim));
  }
  return axis < 0 ? axis + ndim : axis;
}

Axes normalize_axes(std::string_view op, std::span<const std::int64_t> axes,
                    std::int64_t ndim) {
  Axes out;
  for (auto a : axes) out.push_back(normalize_axis(op, a, ndim));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw ShapeError(detail::str_cat("[", op, "] repeated axis in (",
                                  detail::join(axes, ", "), ")"));
  }
  return out;
}

}  // namespace kiln
