// Conv2d, MaxPool2d and AvgPool2d: shape checks naming the module, then the
// composites of functional.cpp. Unbatched (C, H, W) input gets a batch axis.
#include "kiln/modules/conv.hpp"

#include <algorithm>
#include <cmath>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

using kiln::detail::str_cat;

// Runs f on x as (N, C, spatial...) with `spatial` 1 (L) or 2 (H, W) axes,
// adding and removing the batch axis for one example; `channels` < 0 accepts
// any channel count; x must have the dtype of `weight` unless that is None.
// A shape error of the inner op (an input smaller than the kernel) is rethrown
// prefixed by the layer and the input's shape, so it names the layer first.
template <class F>
Array batched(const char* module, const Array& x, std::int64_t channels, const Array& weight, F&& f,
              std::int64_t spatial = 2) {
  detail::check_param_dtype(module, "input", x, "weight", weight);
  const bool single = x.ndim() == spatial + 1;
  const std::int64_t c = x.ndim() > spatial ? x.shape()[x.ndim() - spatial - 1] : -1;
  if ((!single && x.ndim() != spatial + 2) || (channels >= 0 && c != channels)) {
    const std::string cs = channels >= 0 ? std::to_string(channels) : std::string("C");
    const char* axes = spatial == 1 ? "L" : spatial == 2 ? "H, W" : "D, H, W";
    detail::throw_input_shape(module, "input",
                              str_cat("(N, ", cs, ", ", axes, ") or (", cs, ", ", axes, ")"),
                              x.shape());
  }
  Array y;
  try {
    y = f(single ? expand_dims(x, 0) : x);
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat("[", module, "] input ", to_string(x.shape()), ": ", e.what()));
  }
  return single ? squeeze(y, 0) : y;
}

// Checks the channel counts and fills weight (out, in / groups, kernel...)
// and bias (out, 1...) as Equinox's convolutions do.
void init_conv(const char* module, std::int64_t in, std::int64_t out, std::int64_t groups,
               const Shape& kernel, const Array& key, bool use_bias, Array& weight,
               Array& bias) {
  if (in < 1 || out < 1 || groups < 1 || in % groups != 0 || out % groups != 0) {
    throw ValueError(str_cat("[", module, "] in_channels (", in, ") and out_channels (", out,
                             ") must be >= 1 and divisible by groups (", groups, ")"));
  }
  detail::check_key(module, key);
  const Array keys = random::split(key, 2);
  Shape wshape{out, in / groups};
  wshape.insert(wshape.end(), kernel.begin(), kernel.end());
  const double lim = 1.0 / std::sqrt(static_cast<double>(in / groups * numel(kernel)));
  weight = detail::uniform_init(detail::key_at(keys, 0), wshape, lim);
  Shape bshape(kernel.size() + 1, 1);
  bshape[0] = out;
  if (use_bias) bias = detail::uniform_init(detail::key_at(keys, 1), bshape, lim);
}

std::array<std::array<std::int64_t, 2>, 2> checked_padding(const char* module,
                                                           const Padding2& p) {
  for (auto v : {p.h[0], p.h[1], p.w[0], p.w[1]}) {
    if (v < 0) throw ValueError(str_cat("[", module, "] padding must be >= 0, got ", v));
  }
  return p.arr();
}

void check_conv_sizes(const char* module, Int2 kernel, Int2 stride, Int2 dilation) {
  detail::check_positive(module, "kernel size", kernel);
  detail::check_positive(module, "stride", stride);
  detail::check_positive(module, "dilation", dilation);
}

Int2 int2(const std::array<std::int64_t, 2>& a) { return {a[0], a[1]}; }
Padding2 pad2(const std::array<std::array<std::int64_t, 2>, 2>& a) { return {a[0], a[1]}; }

}  // namespace

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Int2 k, const Array& key,
               const Conv2dOptions& o)
    : in_channels(in),
      out_channels(out),
      kernel_size(k.arr()),
      stride(o.stride.arr()),
      padding(checked_padding("nn.Conv2d", o.padding)),
      dilation(o.dilation.arr()),
      groups(o.groups) {
  check_conv_sizes("nn.Conv2d", k, o.stride, o.dilation);
  init_conv("nn.Conv2d", in, out, groups, Shape{k.h, k.w}, key, o.use_bias, weight, bias);
}

Array Conv2d::operator()(const Array& x) const {
  const std::int64_t c = weight.shape()[1] * groups;
  return batched("nn.Conv2d", x, c, weight, [&](const Array& xb) {
    Array y = conv2d(xb, weight,
                     {.stride = int2(stride), .padding = pad2(padding),
                      .dilation = int2(dilation), .groups = groups});
    return bias.is_null() ? y : y + bias;
  });
}

Conv1d::Conv1d(std::int64_t in, std::int64_t out, std::int64_t k, const Array& key,
               const Conv1dOptions& o)
    : in_channels(in),
      out_channels(out),
      kernel_size(k),
      stride(o.stride),
      padding(checked_padding("nn.Conv1d", o.padding)[0][0]),
      dilation(o.dilation),
      groups(o.groups) {
  check_conv_sizes("nn.Conv1d", Int2(1, k), Int2(1, stride), Int2(1, dilation));
  init_conv("nn.Conv1d", in, out, groups, Shape{k}, key, o.use_bias, weight, bias);
}

Array Conv1d::operator()(const Array& x) const {
  const std::int64_t c = weight.shape()[1] * groups;
  return batched(
      "nn.Conv1d", x, c, weight,
      [&](const Array& xb) {
        const Shape& ws = weight.shape();
        Array y = conv2d(expand_dims(xb, 2), reshape(weight, Shape{ws[0], ws[1], 1, ws[2]}),
                         {.stride = {1, stride}, .padding = {0, padding},
                          .dilation = {1, dilation}, .groups = groups});
        y = squeeze(y, 2);
        return bias.is_null() ? y : y + bias;
      },
      /*spatial=*/1);
}

Conv3d::Conv3d(std::int64_t in, std::int64_t out, Int3 k, const Array& key,
               const Conv3dOptions& o)
    : in_channels(in),
      out_channels(out),
      kernel_size(k.arr()),
      stride(o.stride.arr()),
      padding(o.padding.arr()),
      dilation(o.dilation.arr()),
      groups(o.groups) {
  check_conv_sizes("nn.Conv3d", Int2(k.h, k.w), Int2(o.stride.h, o.stride.w),
                   Int2(o.dilation.h, o.dilation.w));
  check_conv_sizes("nn.Conv3d", Int2(k.d, 1), Int2(o.stride.d, 1), Int2(o.dilation.d, 1));
  checked_padding("nn.Conv3d", Padding2(o.padding.h, o.padding.w));
  checked_padding("nn.Conv3d", Padding2(o.padding.d, {0, 0}));
  init_conv("nn.Conv3d", in, out, groups, Shape{k.d, k.h, k.w}, key, o.use_bias, weight, bias);
}

Array Conv3d::operator()(const Array& x) const {
  const std::int64_t c = weight.shape()[1] * groups;
  return batched(
      "nn.Conv3d", x, c, weight,
      [&](const Array& xb) {
        Array y = conv3d(xb, weight,
                         {.stride = Int3(stride[0], stride[1], stride[2]),
                          .padding = Padding3(padding[0], padding[1], padding[2]),
                          .dilation = Int3(dilation[0], dilation[1], dilation[2]),
                          .groups = groups});
        return bias.is_null() ? y : y + bias;
      },
      /*spatial=*/3);
}

ConvTranspose2d::ConvTranspose2d(std::int64_t in, std::int64_t out, Int2 k, const Array& key,
                                 const ConvTranspose2dOptions& o)
    : in_channels(in),
      out_channels(out),
      kernel_size(k.arr()),
      stride(o.stride.arr()),
      padding(checked_padding("nn.ConvTranspose2d", o.padding)),
      output_padding(o.output_padding.arr()),
      dilation(o.dilation.arr()),
      groups(o.groups) {
  check_conv_sizes("nn.ConvTranspose2d", k, o.stride, o.dilation);
  const Int2 op = o.output_padding;
  if (op.h < 0 || op.w < 0 || op.h >= std::max(o.stride.h, o.dilation.h) ||
      op.w >= std::max(o.stride.w, o.dilation.w)) {
    throw ValueError(str_cat("[nn.ConvTranspose2d] output_padding (", op.h, ", ", op.w,
                             ") must be >= 0 and smaller than stride or dilation"));
  }
  init_conv("nn.ConvTranspose2d", in, out, groups, Shape{k.h, k.w}, key, o.use_bias, weight,
            bias);
}

Array ConvTranspose2d::operator()(const Array& x) const {
  const std::int64_t c = weight.shape()[1] * groups;
  return batched("nn.ConvTranspose2d", x, c, weight, [&](const Array& xb) {
    Array y = conv_transpose2d(xb, weight,
                               {.stride = int2(stride), .padding = pad2(padding),
                                .output_padding = int2(output_padding),
                                .dilation = int2(dilation), .groups = groups});
    return bias.is_null() ? y : y + bias;
  });
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Int2 target) : target_shape(target.arr()) {
  detail::check_positive("nn.AdaptiveAvgPool2d", "target shape", target);
}

Array AdaptiveAvgPool2d::operator()(const Array& x) const {
  return batched("nn.AdaptiveAvgPool2d", x, -1, Array(),
                 [&](const Array& xb) { return adaptive_avg_pool2d(xb, int2(target_shape)); });
}

MaxPool2d::MaxPool2d(Int2 k, const PoolOptions& o)
    : kernel_size(k.arr()), stride(o.stride.arr()),
      padding(checked_padding("nn.MaxPool2d", o.padding)) {
  detail::check_positive("nn.MaxPool2d", "kernel size", k);
  detail::check_positive("nn.MaxPool2d", "stride", o.stride);
}

Array MaxPool2d::operator()(const Array& x) const {
  return batched("nn.MaxPool2d", x, -1, Array(), [&](const Array& xb) {
    return max_pool2d(xb, int2(kernel_size), {.stride = int2(stride), .padding = pad2(padding)});
  });
}

AvgPool2d::AvgPool2d(Int2 k, const PoolOptions& o)
    : kernel_size(k.arr()), stride(o.stride.arr()),
      padding(checked_padding("nn.AvgPool2d", o.padding)) {
  detail::check_positive("nn.AvgPool2d", "kernel size", k);
  detail::check_positive("nn.AvgPool2d", "stride", o.stride);
}

Array AvgPool2d::operator()(const Array& x) const {
  return batched("nn.AvgPool2d", x, -1, Array(), [&](const Array& xb) {
    return avg_pool2d(xb, int2(kernel_size), {.stride = int2(stride), .padding = pad2(padding)});
  });
}

}  // namespace kiln::nn
