// BatchNorm, GroupNorm and RMSNorm written with DSL ops (see norm.hpp). The
// statistics are plain reductions, so gradients flow through them.
#include "kiln/modules/norm.hpp"

#include "kiln/dsl/ops.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

using kiln::detail::str_cat;

constexpr const char* kMean = "running_mean";
constexpr const char* kVar = "running_var";

// out * weight + bias with None meaning "skip", `weight`/`bias` already
// broadcastable against `out`.
Array affine(Array out, const Array& weight, const Array& bias) {
  if (!weight.is_null()) out = out * weight;
  if (!bias.is_null()) out = out + bias;
  return out;
}

void check_size(const char* module, const char* what, std::int64_t v) {
  if (v < 1) throw ValueError(str_cat("[", module, "] ", what, " must be >= 1, got ", v));
}

}  // namespace

BatchNorm::BatchNorm(std::int64_t input_size_, State& state, const BatchNormOptions& o)
    : input_size(input_size_), eps(o.eps), momentum(o.momentum), inference(o.inference) {
  check_size("nn.BatchNorm", "input_size", input_size);
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw ValueError(str_cat("[nn.BatchNorm] momentum must be in [0, 1], got ", momentum));
  }
  const Shape c{input_size};
  if (o.channelwise_affine) {
    weight = ones(c, o.dtype);
    bias = zeros(c, o.dtype);
  }
  state_index =
      state.add("BatchNorm", {{kMean, zeros(c, o.dtype)}, {kVar, ones(c, o.dtype)}}, o.name);
}

std::pair<Array, State> BatchNorm::operator()(const Array& x, const State& state) const {
  return (*this)(x, state, inference);
}

std::pair<Array, State> BatchNorm::operator()(const Array& x, const State& state,
                                              bool inference_) const {
  constexpr const char* kName = "nn.BatchNorm";
  detail::check_channels(kName, x, input_size);
  detail::check_param_dtype(kName, "input", x, "weight", weight);
  const Array& running_mean = state.get(state_index, kMean, kName);
  const Array& running_var = state.get(state_index, kVar, kName);
  const std::int64_t nd = x.ndim();
  auto bc = [nd](const Array& v) { return v.is_null() ? v : detail::per_channel(v, nd); };
  const Array w = bc(weight), b = bc(bias);
  if (inference_) {
    const Array mu = astype(bc(running_mean), x.dtype());
    const Array var = astype(bc(running_var), x.dtype());
    return {affine((x - mu) * rsqrt(var + eps), w, b), state};
  }
  Axes axes{0};
  for (std::int64_t i = 2; i < nd; ++i) axes.push_back(i);
  const Array mu = mean(x, axes, true);
  const Array centered = x - mu;
  const Array var = mean(centered * centered, axes, true);
  const Array y = affine(centered * rsqrt(var + eps), w, b);
  const Shape c{input_size};
  auto ema = [&](const Array& running, const Array& batch) {
    return running * momentum + astype(reshape(batch, c), running.dtype()) * (1.0 - momentum);
  };
  return {y, state.set(state_index, {{kMean, ema(running_mean, mu)}, {kVar, ema(running_var, var)}},
                       kName)};
}

GroupNorm::GroupNorm(std::int64_t groups_, std::int64_t channels_, double eps_,
                     bool channelwise_affine)
    : groups(groups_), channels(channels_), eps(eps_) {
  check_size("nn.GroupNorm", "groups", groups);
  check_size("nn.GroupNorm", "channels", channels);
  if (channels % groups != 0) {
    throw ValueError(str_cat("[nn.GroupNorm] channels (", channels,
                             ") must be divisible by groups (", groups, ")"));
  }
  if (channelwise_affine) {
    weight = ones({channels});
    bias = zeros({channels});
  }
}

Array GroupNorm::operator()(const Array& x) const {
  detail::check_channels("nn.GroupNorm", x, channels);
  detail::check_param_dtype("nn.GroupNorm", "input", x, "weight", weight);
  const std::int64_t n = x.shape()[0];
  const Array g = reshape(x, Shape{n, groups, -1});
  const Array mu = mean(g, 2, true);
  const Array centered = g - mu;
  const Array var = mean(centered * centered, 2, true);
  const Array out = reshape(centered * rsqrt(var + eps), x.shape());
  auto bc = [&](const Array& v) { return v.is_null() ? v : detail::per_channel(v, x.ndim()); };
  return affine(out, bc(weight), bc(bias));
}

RMSNorm::RMSNorm(std::vector<std::int64_t> shape_, double eps_, bool use_weight, bool use_bias)
    : shape(std::move(shape_)), eps(eps_) {
  const Shape s(shape.begin(), shape.end());
  if (use_weight) weight = ones(s);
  if (use_bias) bias = zeros(s);
}

Array RMSNorm::operator()(const Array& x) const {
  const Axes axes = detail::trailing_axes("nn.RMSNorm", x, shape);
  detail::check_param_dtype("nn.RMSNorm", "input", x, "weight", weight);
  return affine(x * rsqrt(mean(x * x, axes, true) + eps), weight, bias);
}

}  // namespace kiln::nn
