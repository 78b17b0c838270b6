// conv2d and pooling as im2col composites. Every kernel tap is one strided
// slice of the padded input; the taps are concatenated into columns
// (N, C, T, Ho*Wo) so that a convolution is one batched matmul and a pool one
// reduction over the tap axis, with no transposes on the forward path.
#include "kiln/modules/functional.hpp"

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

Array max_pool2d(const Array& x, Int2 kernel, const PoolOptions& options) {
  return pool("max_pool2d", x, kernel, options, -std::numeric_limits<double>::infinity(),
              [](const Array& a, const Axes& axes) { return max(a, axes); });
}

Array avg_pool2d(const Array& x, Int2 kernel, const PoolOptions& options) {
  const double inv = 1.0 / static_cast<double>(kernel.h * kernel.w);
  return pool("avg_pool2d", x, kernel, options, 0.0,
              [inv](const Array& a, const Axes& axes) { return sum(a, axes) * inv; });
}

}  // namespace kiln::nn
