// conv2d and pooling as im2col composites. Every kernel tap is one strided
// slice of the padded input; the taps are concatenated into columns
// (N, C, T, Ho*Wo) so that a convolution is one batched matmul and a pool one
// reduction over the tap axis, with no transposes on the forward path.
#include "kiln/modules/functional.hpp"

#include <algorithm>
#include <limits>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

void check_nchw(const char* op, const Array& x, const char* what) {
  if (x.is_null()) throw ValueError(detail::str_cat("[", op, "] ", what, " is None"));
  if (x.ndim() != 4) {
    throw ShapeError(detail::str_cat("[", op, "] expected ", what, " (N, C, H, W), got ",
                                     to_string(x.shape())));
  }
  if (!is_inexact(x.dtype())) {
    throw DTypeError(detail::str_cat("[", op, "] requires a floating ", what, ", got ",
                                     name(x.dtype()), " of shape ", to_string(x.shape())));
  }
}

void check_positive(const char* op, const char* what, Int2 v) {
  if (v.h < 1 || v.w < 1) {
    throw ValueError(detail::str_cat("[", op, "] ", what, " must be >= 1, got (", v.h,
                                     ", ", v.w, ")"));
  }
}

Array pad_spatial(const Array& x, const Padding2& p, double value) {
  return pad(x, {{0, 0}, {0, 0}, p.h, p.w}, value);
}

std::int64_t out_size(const char* op, std::int64_t in, std::int64_t k, std::int64_t s,
                      std::int64_t d) {
  const std::int64_t span = d * (k - 1) + 1;
  if (in < span) {
    throw ShapeError(detail::str_cat("[", op, "] the (padded) input extent ", in,
                                     " is smaller than the dilated kernel extent ", span));
  }
  return (in - span) / s + 1;
}

struct Columns {
  Array cols;  // (N, C, KH*KW, Ho*Wo)
  std::int64_t ho, wo;
};

// One strided slice per kernel tap of the already padded xp (N, C, Hp, Wp).
Columns im2col(const char* op, const Array& xp, Int2 k, Int2 s, Int2 d) {
  const Shape& sh = xp.shape();
  const std::int64_t n = sh[0], c = sh[1];
  const std::int64_t ho = out_size(op, sh[2], k.h, s.h, d.h);
  const std::int64_t wo = out_size(op, sh[3], k.w, s.w, d.w);
  std::vector<Array> taps;
  taps.reserve(static_cast<std::size_t>(k.h * k.w));
  for (std::int64_t i = 0; i < k.h; ++i) {
    for (std::int64_t j = 0; j < k.w; ++j) {
      const std::int64_t y0 = i * d.h, x0 = j * d.w;
      Array t = slice(xp, Shape{0, 0, y0, x0},
                      Shape{n, c, y0 + (ho - 1) * s.h + 1, x0 + (wo - 1) * s.w + 1},
                      Shape{1, 1, s.h, s.w});
      taps.push_back(reshape(t, Shape{n, c, 1, ho * wo}));
    }
  }
  Array cols = taps.size() == 1 ? taps[0] : concatenate(taps, 2);
  return {cols, ho, wo};
}

// Pools whose windows tile the input (stride == kernel, no padding) need no
// columns: crop, reshape to (N, C, Ho, KH, Wo, KW) and reduce axes 3 and 5.
bool tiles(Int2 k, const PoolOptions& o) {
  return o.stride.h == k.h && o.stride.w == k.w && o.padding.h[0] == 0 &&
         o.padding.h[1] == 0 && o.padding.w[0] == 0 && o.padding.w[1] == 0;
}

template <class Reduce>
Array pool(const char* op, const Array& x, Int2 k, const PoolOptions& o, double pad_value,
           Reduce reduce) {
  check_nchw(op, x, "input");
  check_positive(op, "kernel size", k);
  check_positive(op, "stride", o.stride);
  const Shape& sh = x.shape();
  if (tiles(k, o)) {
    const std::int64_t ho = out_size(op, sh[2], k.h, k.h, 1);
    const std::int64_t wo = out_size(op, sh[3], k.w, k.w, 1);
    Array cropped = x;
    if (ho * k.h != sh[2] || wo * k.w != sh[3]) {
      cropped = slice(x, Shape{0, 0, 0, 0}, Shape{sh[0], sh[1], ho * k.h, wo * k.w});
    }
    Array r = reshape(cropped, Shape{sh[0], sh[1], ho, k.h, wo, k.w});
    return reduce(r, Axes{3, 5});
  }
  Columns c = im2col(op, pad_spatial(x, o.padding, pad_value), k, o.stride, Int2(1));
  return reshape(reduce(c.cols, Axes{2}), Shape{sh[0], sh[1], c.ho, c.wo});
}

// x (N, C, H, W) with stride - 1 zeros between neighbours (lax's lhs_dilation).
Array interleave_zeros(const Array& x, Int2 s) {
  if (s.h == 1 && s.w == 1) return x;
  const Shape& sh = x.shape();
  const std::int64_t n = sh[0], c = sh[1], h = sh[2], w = sh[3];
  Array spread = nn::pad(reshape(x, Shape{n, c, h, 1, w, 1}),
                         {{0, 0}, {0, 0}, {0, 0}, {0, s.h - 1}, {0, 0}, {0, s.w - 1}});
  return slice(reshape(spread, Shape{n, c, h * s.h, w * s.w}), Shape{0, 0, 0, 0},
               Shape{n, c, (h - 1) * s.h + 1, (w - 1) * s.w + 1});
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

}  // namespace

Array pad(const Array& x, const std::vector<std::array<std::int64_t, 2>>& widths,
          double value) {
  if (x.is_null()) throw ValueError("[pad] the input is None");
  if (static_cast<std::int64_t>(widths.size()) > x.ndim()) {
    throw ShapeError(detail::str_cat("[pad] ", widths.size(),
                                     " (before, after) pairs for an input of shape ",
                                     to_string(x.shape())));
  }
  Array out = x;
  for (std::size_t ax = 0; ax < widths.size(); ++ax) {
    const auto [lo, hi] = widths[ax];
    if (lo < 0 || hi < 0) {
      throw ValueError(detail::str_cat("[pad] widths must be >= 0, got (", lo, ", ", hi,
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
  check_positive("conv2d", "stride", o.stride);
  check_positive("conv2d", "dilation", o.dilation);
  const std::int64_t g = o.groups;
  const std::int64_t n = x.shape()[0], c = x.shape()[1];
  const std::int64_t oc = w.shape()[0], cg = w.shape()[1];
  if (g < 1 || c % g != 0 || oc % g != 0 || cg * g != c) {
    throw ShapeError(detail::str_cat(
        "[conv2d] input of shape ", to_string(x.shape()), " and kernel of shape ",
        to_string(w.shape()), " with groups=", g,
        ": expected kernel (O, C / groups, KH, KW) with C and O divisible by groups"));
  }
  if (x.dtype() != w.dtype()) {
    throw DTypeError(detail::str_cat("[conv2d] dtype mismatch: input ", name(x.dtype()),
                                     ", kernel ", name(w.dtype())));
  }
  const Int2 k(w.shape()[2], w.shape()[3]);
  Columns col = im2col("conv2d", pad_spatial(x, o.padding, 0.0), k, o.stride, o.dilation);
  const std::int64_t taps = k.h * k.w, l = col.ho * col.wo;
  Array out;
  if (g == 1) {
    // (O, C*T) @ (N, C*T, L) -> (N, O, L): one gemm per image.
    out = matmul(reshape(w, Shape{oc, c * taps}), reshape(col.cols, Shape{n, c * taps, l}));
  } else {
    // (G, O/G, Cg*T) @ (N, G, Cg*T, L) -> (N, G, O/G, L).
    out = matmul(reshape(w, Shape{g, oc / g, cg * taps}),
                 reshape(col.cols, Shape{n, g, cg * taps, l}));
  }
  return reshape(out, Shape{n, oc, col.ho, col.wo});
}

Array conv3d(const Array& x, const Array& w, const Conv3dFunctionOptions& o) {
  constexpr const char* kOp = "conv3d";
  for (const auto& [a, what] : {std::pair{&x, "input"}, std::pair{&w, "kernel"}}) {
    if (a->is_null()) throw ValueError(detail::str_cat("[", kOp, "] ", what, " is None"));
    if (a->ndim() != 5 || !is_inexact(a->dtype())) {
      throw ShapeError(detail::str_cat("[", kOp, "] expected a floating ", what,
                                       " (N, C, D, H, W), got ", name(a->dtype()), " of shape ",
                                       to_string(a->shape())));
    }
  }
  check_positive(kOp, "stride", Int2(o.stride.h, o.stride.w));
  check_positive(kOp, "dilation", Int2(o.dilation.h, o.dilation.w));
  check_positive(kOp, "depth stride and dilation", Int2(o.stride.d, o.dilation.d));
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const std::int64_t n = xs[0], c = xs[1], oc = ws[0], cg = ws[1], kd = ws[2];
  if (o.groups < 1 || cg * o.groups != c || oc % o.groups != 0) {
    throw ShapeError(detail::str_cat(
        "[", kOp, "] input of shape ", to_string(xs), " and kernel of shape ", to_string(ws),
        " with groups=", o.groups,
        ": expected kernel (O, C / groups, KD, KH, KW) with C and O divisible by groups"));
  }
  const Array xp = nn::pad(x, {{0, 0}, {0, 0}, o.padding.d});
  const std::int64_t sd = o.stride.d, dd = o.dilation.d;
  const std::int64_t d_out = out_size(kOp, xp.shape()[2], kd, sd, dd);
  const ConvOptions plane{.stride = Int2(o.stride.h, o.stride.w),
                          .padding = Padding2(o.padding.h, o.padding.w),
                          .dilation = Int2(o.dilation.h, o.dilation.w),
                          .groups = o.groups};
  Array acc;
  for (std::int64_t t = 0; t < kd; ++t) {
    const std::int64_t z0 = t * dd;
    // (N, C, Do, H, W) -> (N * Do, C, H, W): every output depth is an image.
    Array planes = slice(xp, Shape{0, 0, z0, 0, 0},
                         Shape{n, c, z0 + (d_out - 1) * sd + 1, xs[3], xs[4]},
                         Shape{1, 1, sd, 1, 1});
    planes = reshape(transpose(planes, Axes{0, 2, 1, 3, 4}), Shape{n * d_out, c, xs[3], xs[4]});
    const Array tap = reshape(slice_axis(w, 2, t, t + 1), Shape{oc, cg, ws[3], ws[4]});
    const Array y = conv2d(planes, tap, plane);
    acc = acc.is_null() ? y : acc + y;
  }
  const Shape& ys = acc.shape();
  return transpose(reshape(acc, Shape{n, d_out, oc, ys[2], ys[3]}), Axes{0, 2, 1, 3, 4});
}

Array conv_transpose2d(const Array& x, const Array& w, const ConvTransposeOptions& o) {
  constexpr const char* kOp = "conv_transpose2d";
  check_nchw(kOp, x, "input");
  check_nchw(kOp, w, "kernel");
  check_positive(kOp, "stride", o.stride);
  check_positive(kOp, "dilation", o.dilation);
  const Int2 k(w.shape()[2], w.shape()[3]), s = o.stride, d = o.dilation, op = o.output_padding;
  if (op.h < 0 || op.w < 0 || op.h >= std::max(s.h, d.h) || op.w >= std::max(s.w, d.w)) {
    throw ValueError(detail::str_cat("[", kOp, "] output_padding (", op.h, ", ", op.w,
                                     ") must be >= 0 and smaller than stride or dilation"));
  }
  // Padding of the interleaved input; a negative amount crops instead.
  const std::array<std::int64_t, 4> p{d.h * (k.h - 1) - o.padding.h[0],
                                      d.h * (k.h - 1) - o.padding.h[1] + op.h,
                                      d.w * (k.w - 1) - o.padding.w[0],
                                      d.w * (k.w - 1) - o.padding.w[1] + op.w};
  Array xi = interleave_zeros(x, s);
  const Shape& sh = xi.shape();
  const std::int64_t crop_lo_h = std::max<std::int64_t>(-p[0], 0);
  const std::int64_t crop_lo_w = std::max<std::int64_t>(-p[2], 0);
  const std::int64_t stop_h = sh[2] - std::max<std::int64_t>(-p[1], 0);
  const std::int64_t stop_w = sh[3] - std::max<std::int64_t>(-p[3], 0);
  if (crop_lo_h >= stop_h || crop_lo_w >= stop_w) {
    throw ShapeError(detail::str_cat("[", kOp, "] padding (", o.padding.h[0], ", ",
                                     o.padding.h[1], "), (", o.padding.w[0], ", ",
                                     o.padding.w[1], ") leaves no output for input ",
                                     to_string(x.shape()), " and kernel ", to_string(w.shape())));
  }
  if (crop_lo_h > 0 || crop_lo_w > 0 || stop_h < sh[2] || stop_w < sh[3]) {
    xi = slice(xi, Shape{0, 0, crop_lo_h, crop_lo_w}, Shape{sh[0], sh[1], stop_h, stop_w});
  }
  auto pos = [](std::int64_t v) { return std::max<std::int64_t>(v, 0); };
  return conv2d(xi, flip(w, Axes{2, 3}),
                {.padding = {{pos(p[0]), pos(p[1])}, {pos(p[2]), pos(p[3])}},
                 .dilation = d,
                 .groups = o.groups});
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
    throw ShapeError(detail::str_cat("[adaptive_avg_pool2d] target (", target.h, ", ", target.w,
                                     ") must be >= 1 and at most the input's (H, W) = (",
                                     sh[2], ", ", sh[3], ")"));
  }
  return adaptive_mean(adaptive_mean(x, 2, target.h), 3, target.w);
}

}  // namespace kiln::nn
