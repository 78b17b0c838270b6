// Conv2d, MaxPool2d and AvgPool2d: shape checks naming the module, then the
// composites of functional.cpp. Unbatched (C, H, W) input gets a batch axis.
#include "kiln/modules/conv.hpp"

#include <cmath>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

using kiln::detail::str_cat;

// Runs f on x as (N, C, H, W); `channels` < 0 accepts any channel count.
template <class F>
Array batched(const char* module, const Array& x, std::int64_t channels, F&& f) {
  detail::check_floating_input(module, "input", x);
  const bool single = x.ndim() == 3;
  const std::int64_t c = x.ndim() >= 3 ? x.shape()[x.ndim() - 3] : -1;
  if ((x.ndim() != 3 && x.ndim() != 4) || (channels >= 0 && c != channels)) {
    const std::string cs = channels >= 0 ? std::to_string(channels) : std::string("C");
    detail::throw_input_shape(module, "input", str_cat("(N, ", cs, ", H, W) or (", cs, ", H, W)"),
                              x.shape());
  }
  Array y = f(single ? expand_dims(x, 0) : x);
  return single ? squeeze(y, 0) : y;
}

std::array<std::array<std::int64_t, 2>, 2> checked_padding(const char* module,
                                                           const Padding2& p) {
  for (auto v : {p.h[0], p.h[1], p.w[0], p.w[1]}) {
    if (v < 0) throw ValueError(str_cat("[", module, "] padding must be >= 0, got ", v));
  }
  return p.arr();
}

void check_positive(const char* module, const char* what, Int2 v) {
  if (v.h < 1 || v.w < 1) {
    throw ValueError(str_cat("[", module, "] ", what, " must be >= 1, got (", v.h, ", ",
                             v.w, ")"));
  }
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
  check_positive("nn.Conv2d", "kernel size", k);
  check_positive("nn.Conv2d", "stride", o.stride);
  check_positive("nn.Conv2d", "dilation", o.dilation);
  if (in < 1 || out < 1 || groups < 1 || in % groups != 0 || out % groups != 0) {
    throw ValueError(str_cat("[nn.Conv2d] in_channels (", in, ") and out_channels (", out,
                             ") must be >= 1 and divisible by groups (", groups, ")"));
  }
  detail::check_key("nn.Conv2d", key);
  const Array keys = random::split(key, 2);
  const double lim = 1.0 / std::sqrt(static_cast<double>(in / groups * k.h * k.w));
  weight = detail::uniform_init(detail::key_at(keys, 0), Shape{out, in / groups, k.h, k.w}, lim);
  if (o.use_bias) bias = detail::uniform_init(detail::key_at(keys, 1), Shape{out, 1, 1}, lim);
}

Array Conv2d::operator()(const Array& x) const {
  const std::int64_t c = weight.shape()[1] * groups;
  return batched("nn.Conv2d", x, c, [&](const Array& xb) {
    Array y = conv2d(xb, weight,
                     {.stride = int2(stride), .padding = pad2(padding),
                      .dilation = int2(dilation), .groups = groups});
    return bias.is_null() ? y : y + bias;
  });
}

MaxPool2d::MaxPool2d(Int2 k, const PoolOptions& o)
    : kernel_size(k.arr()), stride(o.stride.arr()),
      padding(checked_padding("nn.MaxPool2d", o.padding)) {
  check_positive("nn.MaxPool2d", "kernel size", k);
  check_positive("nn.MaxPool2d", "stride", o.stride);
}

Array MaxPool2d::operator()(const Array& x) const {
  return batched("nn.MaxPool2d", x, -1, [&](const Array& xb) {
    return max_pool2d(xb, int2(kernel_size), {.stride = int2(stride), .padding = pad2(padding)});
  });
}

AvgPool2d::AvgPool2d(Int2 k, const PoolOptions& o)
    : kernel_size(k.arr()), stride(o.stride.arr()),
      padding(checked_padding("nn.AvgPool2d", o.padding)) {
  check_positive("nn.AvgPool2d", "kernel size", k);
  check_positive("nn.AvgPool2d", "stride", o.stride);
}

Array AvgPool2d::operator()(const Array& x) const {
  return batched("nn.AvgPool2d", x, -1, [&](const Array& xb) {
    return avg_pool2d(xb, int2(kernel_size), {.stride = int2(stride), .padding = pad2(padding)});
  });
}

}  // namespace kiln::nn
