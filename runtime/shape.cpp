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
