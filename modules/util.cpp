// Helpers shared by the kiln::nn layers (see util.hpp).
#include "kiln/modules/util.hpp"

#include <algorithm>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn::detail {

using kiln::detail::str_cat;

void check_key(std::string_view module, const Array& key) {
  if (key.is_null()) {
    throw ValueError(str_cat("[", module, "] a PRNG key is required (e.g. kiln::random::key(0))"));
  }
  if (key.dtype() != u32 || key.shape() != Shape{2}) {
    throw ValueError(str_cat("[", module, "] expected a PRNG key (u32, shape (2,)), got ",
                             name(key.dtype()), " of shape ", to_string(key.shape())));
  }
}

Array key_at(const Array& keys, std::int64_t i) {
  return reshape(slice_axis(keys, 0, i, i + 1), Shape{2});
}

Array uniform_init(const Array& key, const Shape& shape, double lim) {
  return random::uniform(key, shape, f32, -lim, lim);
}

void throw_input_shape(std::string_view module, std::string_view what,
                       std::string_view expected, const Shape& got) {
  throw ShapeError(str_cat("[", module, "] expected ", what, " ", expected, ", got ",
                           to_string(got)));
}

void check_floating_input(std::string_view module, std::string_view what, const Array& a) {
  if (a.is_null()) throw ValueError(str_cat("[", module, "] ", what, " is None"));
  if (!is_inexact(a.dtype())) {
    throw DTypeError(str_cat("[", module, "] ", what, " must be floating, got ",
                             name(a.dtype()), " of shape ", to_string(a.shape())));
  }
}

void check_param_dtype(std::string_view module, std::string_view what, const Array& a,
                       std::string_view param_name, const Array& param) {
  check_floating_input(module, what, a);
  if (!param.is_null() && a.dtype() != param.dtype()) {
    throw DTypeError(str_cat("[", module, "] ", what, " is ", name(a.dtype()), " but ", param_name,
                             " is ", name(param.dtype()),
                             " (cast one to the other, e.g. the model with tree::map)"));
  }
}

void check_channels(std::string_view module, const Array& x, std::int64_t channels) {
  check_floating_input(module, "input", x);
  if (x.ndim() < 2) {
    throw_input_shape(module, "input", str_cat("(N, ", channels, ", ...)"), x.shape());
  }
  if (x.shape()[1] != channels) {
    throw ShapeError(str_cat("[", module, "] input ", to_string(x.shape()), " has ",
                             x.shape()[1], " channels, expected ", channels));
  }
}

Axes trailing_axes(std::string_view module, const Array& x,
                   const std::vector<std::int64_t>& shape) {
  check_floating_input(module, "input", x);
  const auto k = static_cast<std::int64_t>(shape.size());
  const Shape& xs = x.shape();
  if (x.ndim() < k || !std::equal(shape.begin(), shape.end(), xs.end() - k)) {
    throw_input_shape(module, "input", str_cat("(..., ", kiln::detail::join(shape, ", "), ")"),
                      xs);
  }
  Axes axes;
  for (std::int64_t i = x.ndim() - k; i < x.ndim(); ++i) axes.push_back(i);
  return axes;
}

void check_mask(std::string_view module, const Array& mask, const Shape& target,
                std::string_view layout) {
  if (mask.dtype() != bool_) {
    throw DTypeError(str_cat("[", module, "] mask must be bool, got ", name(mask.dtype()),
                             " of shape ", to_string(mask.shape())));
  }
  // numpy broadcasting to `target`: from the right, each axis is 1 or equal.
  const Shape& m = mask.shape();
  bool ok = m.size() <= target.size();
  for (std::size_t i = 0; ok && i < m.size(); ++i) {
    const std::int64_t a = m[m.size() - 1 - i], t = target[target.size() - 1 - i];
    ok = a == 1 || a == t;
  }
  if (!ok) {
    throw ShapeError(str_cat("[", module, "] mask ", to_string(m), " does not broadcast to ",
                             to_string(target), " = ", layout));
  }
}

Array per_channel(const Array& v, std::int64_t ndim) {
  Shape s(static_cast<std::size_t>(ndim - 1), 1);
  s[0] = v.shape()[0];
  return reshape(v, s);
}

}  // namespace kiln::nn::detail
