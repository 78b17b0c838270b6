// Stateless building blocks of kiln::nn written only with DSL ops: padding,
// 2-D and 3-D convolution (unfold, i.e. im2col, + matmul) and 2-D max/average
// pooling, all in NCHW
// with OIHW kernels (Equinox/lax.conv layout). Being composites, they trace,
// get gradients from the primitives' vjp rules and run on every backend.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/runtime/array.hpp"

namespace kiln::nn {

// (height, width) pair for kernel sizes, strides and dilations; an integer
// means the same value for both: `2` or `{2, 1}`.
struct Int2 {
  std::int64_t h = 1, w = 1;
  Int2(std::int64_t v = 1) : h(v), w(v) {}  // NOLINT: implicit by design
  Int2(std::int64_t h_, std::int64_t w_) : h(h_), w(w_) {}
  std::array<std::int64_t, 2> arr() const { return {h, w}; }
};

namespace detail {
// ValueError "[<op>] <what> must be >= 1, got (h, w)" unless both are.
void check_positive(const char* op, const char* what, Int2 v);
}  // namespace detail

// Zero padding of the two spatial axes as (low, high) per axis: `1` (all
// sides), `{1, 2}` (height, width: symmetric), or `{{0, 1}, {1, 1}}`.
struct Padding2 {
  std::array<std::int64_t, 2> h{0, 0}, w{0, 0};
  Padding2(std::int64_t p = 0) : h{p, p}, w{p, p} {}  // NOLINT: implicit
  Padding2(std::int64_t ph, std::int64_t pw) : h{ph, ph}, w{pw, pw} {}
  Padding2(std::array<std::int64_t, 2> h_, std::array<std::int64_t, 2> w_)
      : h(h_), w(w_) {}
  std::array<std::array<std::int64_t, 2>, 2> arr() const { return {h, w}; }
};

// jnp.pad(x, widths, constant_values=value): widths[i] = (before, after) for
// axis i; fewer entries than x.ndim() leave the trailing axes unpadded.
Array pad(const Array& x, const std::vector<std::array<std::int64_t, 2>>& widths,
          double value = 0.0);

struct ConvOptions {
  Int2 stride = 1;
  Padding2 padding = 0;
  Int2 dilation = 1;
  std::int64_t groups = 1;
};

// lax.conv_general_dilated(x, w, stride, padding, rhs_dilation=dilation,
// feature_group_count=groups) with x (N, C, H, W) and w (O, C/groups, KH, KW):
// result (N, O, Ho, Wo). No bias (add it yourself, shape (O, 1, 1)).
Array conv2d(const Array& x, const Array& w, const ConvOptions& options = {});

// (depth, height, width) and per-axis (low, high) zero padding for conv3d;
// an integer means the same for every axis, three integers symmetric padding.
struct Int3 {
  std::int64_t d = 1, h = 1, w = 1;
  Int3(std::int64_t v = 1) : d(v), h(v), w(v) {}  // NOLINT: implicit by design
  Int3(std::int64_t d_, std::int64_t h_, std::int64_t w_) : d(d_), h(h_), w(w_) {}
  std::array<std::int64_t, 3> arr() const { return {d, h, w}; }
};
struct Padding3 {
  std::array<std::int64_t, 2> d{0, 0}, h{0, 0}, w{0, 0};
  Padding3(std::int64_t p = 0) : d{p, p}, h{p, p}, w{p, p} {}  // NOLINT: implicit
  Padding3(std::int64_t pd, std::int64_t ph, std::int64_t pw)
      : d{pd, pd}, h{ph, ph}, w{pw, pw} {}
  Padding3(std::array<std::int64_t, 2> d_, std::array<std::int64_t, 2> h_,
           std::array<std::int64_t, 2> w_)
      : d(d_), h(h_), w(w_) {}
  std::array<std::array<std::int64_t, 2>, 3> arr() const { return {d, h, w}; }
};

struct Conv3dFunctionOptions {
  Int3 stride = 1;
  Padding3 padding = 0;
  Int3 dilation = 1;
  std::int64_t groups = 1;
};

// conv2d's 3-D counterpart: x (N, C, D, H, W), w (O, C/groups, KD, KH, KW) ->
// (N, O, Do, Ho, Wo): a 3-D unfold and one batched matmul.
Array conv3d(const Array& x, const Array& w, const Conv3dFunctionOptions& options = {});

struct ConvTransposeOptions {
  Int2 stride = 1;
  Padding2 padding = 0;
  Int2 output_padding = 0;  // extra rows/columns at the high end (< stride or dilation)
  Int2 dilation = 1;
  std::int64_t groups = 1;
};

// The transpose of conv2d, as eqx.nn.ConvTranspose2d computes it (conv2d of
// x (N, C, H, W) zero-interleaved by `stride`, padded by dilation * (K - 1) -
// padding (+ output_padding at the high end), with w (O, C/groups, KH, KW)
// flipped spatially). Ho = (H - 1) * stride - pad_lo - pad_hi + dilation *
// (KH - 1) + 1 + output_padding. It is the gradient of conv2d with respect to
// its input (for w with its two channel axes swapped), and is computed so: a
// matmul of x into tap columns, then fold.
Array conv_transpose2d(const Array& x, const Array& w, const ConvTransposeOptions& options = {});

struct PoolOptions {
  Int2 stride = 1;  // Equinox's default: 1 (not the kernel size)
  Padding2 padding = 0;
};

// Max over each kernel window of x (N, C, H, W); padding is -inf (never wins).
Array max_pool2d(const Array& x, Int2 kernel, const PoolOptions& options = {});
// Mean over each window; padded zeros count (divides by KH * KW, as Equinox).
Array avg_pool2d(const Array& x, Int2 kernel, const PoolOptions& options = {});
// Mean of x (N, C, H, W) over target.h x target.w bins (eqx.nn.AdaptiveAvgPool2d):
// along an axis of n elements split into t bins, the first n % t bins hold
// n / t + 1 elements and the rest n / t (no overlap). Needs t <= n.
Array adaptive_avg_pool2d(const Array& x, Int2 target);

}  // namespace kiln::nn
