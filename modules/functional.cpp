// Convolutions and pooling on the unfold primitive (im2col, dsl/ops.hpp): the
// window's taps of every image come out as columns (N, C, T, Ho*Wo) in one
// pass, padding included, so that a convolution is one batched matmul and a
// pool one reduction over the tap axis, with no transposes on the forward
// path. Their gradients flow back through fold (col2im), one pass too.
#include "kiln/modules/functional.hpp"

#include <algorithm>
#include <limits>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

// kiln::detail, not kiln::nn::detail (modules/util.hpp), where both are visible.
using kiln::detail::str_cat;

void check_nchw(const char* op, const Array& x, const char* what) {
  if (x.is_null()) throw ValueError(str_cat("[", op, "] ", what, " is None"));
  if (x.ndim() != 4) {
    throw ShapeError(str_cat("[", op, "] expected ", what, " (N, C, H, W), got ",
                             to_string(x.shape())));
  }
  if (!is_inexact(x.dtype())) {
    throw DTypeError(str_cat("[", op, "] requires a floating ", what, ", got ",
                             name(x.dtype()), " of shape ", to_string(x.shape())));
  }
}

struct Columns {
  Array cols;  // (N, C, KH*KW, Ho*Wo)
  std::int64_t ho, wo;
};

// The window's taps of x (N, C, H, W) as columns, `pad_value` in the padding.
Columns im2col(const char* op, const Array& x, Int2 k, Int2 s, const Padding2& p, Int2 d,
               double pad_value) {
  const Window w{.size = {k.h, k.w}, .strides = {s.h, s.w}, .padding = {p.h, p.w},
                 .dilation = {d.h, d.w}};
  const Shape o = window_output(op, Shape{x.shape()[2], x.shape()[3]}, w);
  return {unfold(x, w, pad_value), o[0], o[1]};
}

// Every pool reduces the tap axis of its columns, windows that tile the input
// too: reshaping those to (N, C, Ho, KH, Wo, KW) and reducing axes 3 and 5
// instead made the CNN step (bench/cnn_step, one thread) 20% slower, the
// strided reduction and its gradient's broadcasts costing more than the
// columns' copy.
template <class Reduce>
Array pool(const char* op, const Array& x, Int2 k, const PoolOptions& o, double pad_value,
           Reduce reduce) {
  check_nchw(op, x, "input");
  detail::check_positive(op, "kernel size", k);
  detail::check_positive(op, "stride", o.stride);
  const Shape& sh = x.shape();
  Columns c = im2col(op, x, k, o.stride, o.padding, Int2(1), pad_value);
  return reshape(reduce(c.cols, Axes{2}), Shape{sh[0], sh[1], c.ho, c.wo});
}

// Means over Equinox's adaptive bins along `axis` (see adaptive_avg_pool2d).
Array adaptive_mean(const Array& x, std::int64_t axis, std::int64_t t) {
  const std::int64_t n = x.shape()[axis], q = n / t, r = n % t;
  auto bins = [axis](const Array& part, std::int64_t count, std::int64_t size) {
    Shape s = part.shape();
    s[axis] = count;
    s.insert(s.begin() + axis + 1, size);
    return mean(reshape(part, s), axis + 1);
  };
  if (r == 0) return bins(x, t, q);
  const std::int64_t split_at = r * (q + 1);
  return concatenate({bins(slice_axis(x, axis, 0, split_at), r, q + 1),
                      bins(slice_axis(x, axis, split_at, n), t - r, q)},
                     axis);
}

// x (N, C, S...) convolved with w (O, C / groups, K...) (checked by the
// caller `op`) over `window` (w's K... as its size): (N, O, O_1 ...), one
// batched matmul over the unfolded columns: (G, O/G, Cg*T) @ (N, G, Cg*T, L)
// -> (N, G, O/G, L), one gemm per image and group.
Array convolve(const char* op, const Array& x, const Array& w, const Window& window,
               std::int64_t g) {
  const Shape& xs = x.shape();
  const std::int64_t n = xs[0], oc = w.shape()[0], cg = w.shape()[1];
  const Shape o = window_output(op, Shape(xs.begin() + 2, xs.end()), window);
  const Array cols = unfold(x, window);  // (N, C, T, L)
  const std::int64_t taps = numel(window.size), l = numel(o);
  const Array out = matmul(reshape(w, Shape{g, oc / g, cg * taps}),
                           reshape(cols, Shape{n, g, cg * taps, l}));
  Shape shape{n, oc};
  shape.insert(shape.end(), o.begin(), o.end());
  return reshape(out, shape);
}

}  // namespace

Array pad(const Array& x, const std::vector<std::array<std::int64_t, 2>>& widths,
          double value) {
  if (x.is_null()) throw ValueError("[pad] the input is None");
  if (static_cast<std::int64_t>(widths.size()) > x.ndim()) {
    throw ShapeError(str_cat("[pad] ", widths.size(),
                             " (before, after) pairs for an input of shape ",
                             to_string(x.shape())));
  }
  Array out = x;
  for (std::size_t ax = 0; ax < widths.size(); ++ax) {
    const auto [lo, hi] = widths[ax];
    if (lo < 0 || hi < 0) {
      throw ValueError(str_cat("[pad] widths must be >= 0, got (", lo, ", ", hi,
                               ") for axis ", ax));
    }
    if (lo == 0 && hi == 0) continue;
    std::vector<Array> parts;
    Shape side = out.shape();
    if (lo > 0) {
      side[ax] = lo;
      parts.push_back(full(side, value, out.dtype(), out.device()));
    }
    parts.push_back(out);
    if (hi > 0) {
      side[ax] = hi;
      parts.push_back(full(side, value, out.dtype(), out.device()));
    }
    out = concatenate(parts, static_cast<std::int64_t>(ax));
  }
  return out;
}

Array conv2d(const Array& x, const Array& w, const ConvOptions& o) {
  check_nchw("conv2d", x, "input");
  check_nchw("conv2d", w, "kernel");
  detail::check_positive("conv2d", "stride", o.stride);
  detail::check_positive("conv2d", "dilation", o.dilation);
  const std::int64_t g = o.groups;
  const std::int64_t c = x.shape()[1];
  const std::int64_t oc = w.shape()[0], cg = w.shape()[1];
  if (g < 1 || c % g != 0 || oc % g != 0 || cg * g != c) {
    throw ShapeError(str_cat(
        "[conv2d] input of shape ", to_string(x.shape()), " and kernel of shape ",
        to_string(w.shape()), " with groups=", g,
        ": expected kernel (O, C / groups, KH, KW) with C and O divisible by groups"));
  }
  if (x.dtype() != w.dtype()) {
    throw DTypeError(str_cat("[conv2d] dtype mismatch: input ", name(x.dtype()),
                             ", kernel ", name(w.dtype())));
  }
  return convolve("conv2d", x, w, {.size = {w.shape()[2], w.shape()[3]},
                         .strides = {o.stride.h, o.stride.w},
                         .padding = {o.padding.h, o.padding.w},
                         .dilation = {o.dilation.h, o.dilation.w}},
                  g);
}

Array conv3d(const Array& x, const Array& w, const Conv3dFunctionOptions& o) {
  constexpr const char* kOp = "conv3d";
  for (const auto& [a, what] : {std::pair{&x, "input"}, std::pair{&w, "kernel"}}) {
    if (a->is_null()) throw ValueError(str_cat("[", kOp, "] ", what, " is None"));
    if (a->ndim() != 5 || !is_inexact(a->dtype())) {
      throw ShapeError(str_cat("[", kOp, "] expected a floating ", what,
                               " (N, C, D, H, W), got ", name(a->dtype()), " of shape ",
                               to_string(a->shape())));
    }
  }
  detail::check_positive(kOp, "stride", Int2(o.stride.h, o.stride.w));
  detail::check_positive(kOp, "dilation", Int2(o.dilation.h, o.dilation.w));
  detail::check_positive(kOp, "depth stride and dilation", Int2(o.stride.d, o.dilation.d));
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const std::int64_t c = xs[1], oc = ws[0], cg = ws[1];
  if (o.groups < 1 || cg * o.groups != c || oc % o.groups != 0) {
    throw ShapeError(str_cat(
        "[", kOp, "] input of shape ", to_string(xs), " and kernel of shape ", to_string(ws),
        " with groups=", o.groups,
        ": expected kernel (O, C / groups, KD, KH, KW) with C and O divisible by groups"));
  }
  return convolve(kOp, x, w, {.size = {ws[2], ws[3], ws[4]},
                         .strides = {o.stride.d, o.stride.h, o.stride.w},
                         .padding = {o.padding.d, o.padding.h, o.padding.w},
                         .dilation = {o.dilation.d, o.dilation.h, o.dilation.w}},
                  o.groups);
}

Array conv_transpose2d(const Array& x, const Array& w, const ConvTransposeOptions& o) {
  constexpr const char* kOp = "conv_transpose2d";
  check_nchw(kOp, x, "input");
  check_nchw(kOp, w, "kernel");
  detail::check_positive(kOp, "stride", o.stride);
  detail::check_positive(kOp, "dilation", o.dilation);
  const Int2 k(w.shape()[2], w.shape()[3]), s = o.stride, d = o.dilation, op = o.output_padding;
  if (op.h < 0 || op.w < 0 || op.h >= std::max(s.h, d.h) || op.w >= std::max(s.w, d.w)) {
    throw ValueError(str_cat("[", kOp, "] output_padding (", op.h, ", ", op.w,
                             ") must be >= 0 and smaller than stride or dilation"));
  }
  // The adjoint of the convolution of an output-sized image z (padding, stride
  // and dilation as given) whose kernel is w with its two channel axes
  // swapped (per group): columns of taps from one matmul of x, summed back
  // into z by fold. No zeros are interleaved into x and no flipped kernel
  // slides over them (the old composite did s.h * s.w times the work).
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const std::int64_t n = xs[0], cin = xs[1], cout = ws[0], cig = ws[1], g = o.groups;
  if (g < 1 || cig * g != cin || cout % g != 0) {
    throw ShapeError(str_cat(
        "[", kOp, "] input of shape ", to_string(xs), " and kernel of shape ", to_string(ws),
        " with groups=", g,
        ": expected kernel (O, C / groups, KH, KW) with C and O divisible by groups"));
  }
  const std::int64_t out_h = (xs[2] - 1) * s.h + d.h * (k.h - 1) + 1 + op.h - o.padding.h[0] -
                             o.padding.h[1];
  const std::int64_t out_w = (xs[3] - 1) * s.w + d.w * (k.w - 1) + 1 + op.w - o.padding.w[0] -
                             o.padding.w[1];
  if (out_h < 1 || out_w < 1) {
    throw ShapeError(str_cat("[", kOp, "] padding (", o.padding.h[0], ", ",
                             o.padding.h[1], "), (", o.padding.w[0], ", ",
                             o.padding.w[1], ") leaves no output for input ",
                             to_string(xs), " and kernel ", to_string(ws)));
  }
  const Window win{.size = {k.h, k.w}, .strides = {s.h, s.w},
                   .padding = {o.padding.h, o.padding.w}, .dilation = {d.h, d.w}};
  // The convolution of z has H + op / stride positions per axis: x feeds the
  // first H, the rest of the columns are zeros.
  const Shape pos = window_output(kOp, Shape{out_h, out_w}, win);
  Array xp = x;
  if (pos[0] > xs[2] || pos[1] > xs[3]) {
    xp = nn::pad(x, {{0, 0}, {0, 0}, {0, pos[0] - xs[2]}, {0, pos[1] - xs[3]}});
  }
  const std::int64_t taps = k.h * k.w, l = pos[0] * pos[1], cog = cout / g;
  // (G, O/G * T, C/G): row (o, t) of group G holds w[G * O/G + o, :, t].
  const Array m = reshape(transpose(reshape(w, Shape{g, cog, cig, taps}), Axes{0, 1, 3, 2}),
                          Shape{g, cog * taps, cig});
  const Array cols = matmul(m, reshape(xp, Shape{n, g, cig, l}));  // (N, G, O/G * T, L)
  return fold(reshape(cols, Shape{n, cout, taps, l}), Shape{out_h, out_w}, win);
}

Array max_pool2d(const Array& x, Int2 kernel, const PoolOptions& options) {
  return pool("max_pool2d", x, kernel, options, -std::numeric_limits<double>::infinity(),
              [](const Array& a, const Axes& axes) { return max(a, axes); });
}

Array avg_pool2d(const Array& x, Int2 kernel, const PoolOptions& options) {
  const double inv = 1.0 / static_cast<double>(kernel.h * kernel.w);
  return pool("avg_pool2d", x, kernel, options, 0.0,
              [inv](const Array& a, const Axes& axes) { return sum(a, axes) * inv; });
}

Array adaptive_avg_pool2d(const Array& x, Int2 target) {
  check_nchw("adaptive_avg_pool2d", x, "input");
  const Shape& sh = x.shape();
  if (target.h < 1 || target.w < 1 || target.h > sh[2] || target.w > sh[3]) {
    throw ShapeError(str_cat("[adaptive_avg_pool2d] target (", target.h, ", ", target.w,
                             ") must be >= 1 and at most the input's (H, W) = (",
                             sh[2], ", ", sh[3], ")"));
  }
  return adaptive_mean(adaptive_mean(x, 2, target.h), 3, target.w);
}

namespace detail {
void check_positive(const char* op, const char* what, Int2 v) {
  if (v.h < 1 || v.w < 1) {
    throw ValueError(str_cat("[", op, "] ", what, " must be >= 1, got (", v.h, ", ", v.w, ")"));
  }
}
}  // namespace detail

}  // namespace kiln::nn
