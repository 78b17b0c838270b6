// Sliding windows: unfold (im2col) and fold (col2im). The shape rule lives
// here: the primitives' WindowParams carry every per-axis value resolved
// (defaults filled in, the image's spatial extents), so a backend and the vjp
// and vmap rules never repeat it.
#include <cmath>
#include <vector>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

// One value per spatial axis: `given`, or `fallback` on every axis when empty.
Shape per_axis(const char* op, const char* what, const Shape& given, std::size_t r,
               std::int64_t fallback, std::int64_t at_least) {
  if (given.empty()) return Shape(r, fallback);
  if (given.size() != r) {
    throw ValueError(detail::str_cat("[", op, "] ", what, " ", to_string(given), " has ",
                                     given.size(), " values for a ", r, "-axis window"));
  }
  for (const std::int64_t v : given) {
    if (v < at_least) {
      throw ValueError(detail::str_cat("[", op, "] ", what, " must be >= ", at_least,
                                       " on every axis, got ", to_string(given)));
    }
  }
  return given;
}

WindowParams resolve(const char* op, const Shape& spatial, const Window& w) {
  const std::size_t r = w.size.size();
  if (r == 0) throw ValueError(detail::str_cat("[", op, "] the window has no axes"));
  WindowParams p;
  p.window = per_axis(op, "window size", w.size, r, 1, 1);
  p.strides = per_axis(op, "strides", w.strides, r, 1, 1);
  p.dilation = per_axis(op, "dilation", w.dilation, r, 1, 1);
  p.pad_lo = Shape(r, 0);
  p.pad_hi = Shape(r, 0);
  if (!w.padding.empty()) {
    if (w.padding.size() != r) {
      throw ValueError(detail::str_cat("[", op, "] padding has ", w.padding.size(),
                                       " (low, high) pairs for a ", r, "-axis window"));
    }
    for (std::size_t a = 0; a < r; ++a) {
      p.pad_lo[a] = w.padding[a][0];
      p.pad_hi[a] = w.padding[a][1];
      if (p.pad_lo[a] < 0 || p.pad_hi[a] < 0) {
        throw ValueError(detail::str_cat("[", op, "] padding must be >= 0, got (",
                                         p.pad_lo[a], ", ", p.pad_hi[a], ") on spatial axis ",
                                         a));
      }
    }
  }
  p.spatial = spatial;
  return p;
}

Shape output_extents(const char* op, const WindowParams& p) {
  for (std::size_t a = 0; a < p.window.size(); ++a) {
    const std::int64_t padded = p.spatial[a] + p.pad_lo[a] + p.pad_hi[a];
    const std::int64_t span = p.dilation[a] * (p.window[a] - 1) + 1;
    if (padded < span) {
      throw ShapeError(detail::str_cat("[", op, "] the (padded) input extent ", padded,
                                       " is smaller than the dilated kernel extent ", span,
                                       " on spatial axis ", a));
    }
  }
  return window_extents(p);
}

}  // namespace

Shape window_output(const char* op, const Shape& spatial, const Window& window) {
  return output_extents(op, resolve(op, spatial, window));
}

Array unfold(const Array& x, const Window& window, double pad_value) {
  detail::check_not_none("unfold", x, "input");
  const std::size_t r = window.size.size();
  const Shape& xs = x.shape();
  if (xs.size() < r) {
    throw ShapeError(detail::str_cat("[unfold] a ", r, "-axis window needs an input of rank >= ",
                                     r, ", got shape ", to_string(xs)));
  }
  if (!is_inexact(x.dtype()) && !std::isfinite(pad_value)) {
    throw ValueError(detail::str_cat("[unfold] pad value ", pad_value,
                                     " for an input of dtype ", name(x.dtype()),
                                     ": only floating inputs take infinities or NaN"));
  }
  const std::size_t lead = xs.size() - r;
  WindowParams p = resolve("unfold", Shape(xs.begin() + static_cast<std::ptrdiff_t>(lead),
                                           xs.end()),
                           window);
  p.pad_value = pad_value;
  const Shape o = output_extents("unfold", p);
  Shape out(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(lead));
  out.push_back(numel(p.window));
  out.push_back(numel(o));
  const Array inputs[] = {x};
  return detail::bind<Prim::kUnfold>(std::move(p), inputs, Aval{x.dtype(), std::move(out)});
}

Array fold(const Array& cols, const Shape& spatial, const Window& window) {
  detail::check_not_none("fold", cols, "columns");
  if (cols.dtype() == DType::kBool) {
    throw DTypeError("[fold] sums columns: bool has no sum (convert to a numeric dtype)");
  }
  if (spatial.size() != window.size.size()) {
    throw ValueError(detail::str_cat("[fold] image extents ", to_string(spatial), " for a ",
                                     window.size.size(), "-axis window"));
  }
  for (const std::int64_t s : spatial) {
    if (s < 0) {
      throw ValueError(detail::str_cat("[fold] image extents must be >= 0, got ",
                                       to_string(spatial)));
    }
  }
  WindowParams p = resolve("fold", spatial, window);
  const Shape o = output_extents("fold", p);
  const Shape& cs = cols.shape();
  if (cs.size() < 2 || cs[cs.size() - 2] != numel(p.window) || cs.back() != numel(o)) {
    throw ShapeError(detail::str_cat("[fold] columns of shape ", to_string(cs), " for window ",
                                     to_string(p.window), " over an image of ",
                                     to_string(spatial), ": expected (..., ", numel(p.window),
                                     ", ", numel(o), ")"));
  }
  Shape out(cs.begin(), cs.end() - 2);
  out.insert(out.end(), spatial.begin(), spatial.end());
  const Array inputs[] = {cols};
  return detail::bind<Prim::kFold>(std::move(p), inputs, Aval{cols.dtype(), std::move(out)});
}

}  // namespace kiln
