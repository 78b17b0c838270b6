// Linear, MLP, Embedding, LayerNorm and Dropout, written with DSL ops.
#include "kiln/modules/layers.hpp"

#include <cmath>
#include <numeric>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {

using kiln::detail::str_cat;

Linear::Linear(std::int64_t in, std::int64_t out, const Array& key, bool use_bias)
    : in_features(in), out_features(out) {
  if (in < 1 || out < 1) {
    throw ValueError(str_cat("[nn.Linear] in_features and out_features must be >= 1, got ",
                             in, " and ", out));
  }
  detail::check_key("nn.Linear", key);
  const Array keys = random::split(key, 2);
  const double lim = 1.0 / std::sqrt(static_cast<double>(in));
  weight = detail::uniform_init(detail::key_at(keys, 0), Shape{out, in}, lim);
  if (use_bias) bias = detail::uniform_init(detail::key_at(keys, 1), Shape{out}, lim);
}

Array Linear::operator()(const Array& x) const {
  detail::check_param_dtype("nn.Linear", "input", x, "weight", weight);
  const std::int64_t in = weight.shape()[1];
  if (x.ndim() < 1 || x.shape().back() != in) {
    detail::throw_input_shape("nn.Linear", "input", str_cat("(..., ", in, ")"), x.shape());
  }
  Array y = matmul(x, transpose(weight));
  return bias.is_null() ? y : y + bias;
}

MLP::MLP(std::int64_t in_size, std::int64_t out_size, std::int64_t width_size,
         std::int64_t depth, const Array& key, Activation act, Activation final_act,
         bool use_bias, bool use_final_bias)
    : activation(act), final_activation(final_act) {
  if (depth < 0) throw ValueError(str_cat("[nn.MLP] depth must be >= 0, got ", depth));
  detail::check_key("nn.MLP", key);
  const Array keys = random::split(key, depth + 1);
  if (depth == 0) {
    layers.emplace_back(in_size, out_size, detail::key_at(keys, 0), use_final_bias);
    return;
  }
  layers.emplace_back(in_size, width_size, detail::key_at(keys, 0), use_bias);
  for (std::int64_t i = 1; i < depth; ++i) {
    layers.emplace_back(width_size, width_size, detail::key_at(keys, i), use_bias);
  }
  layers.emplace_back(width_size, out_size, detail::key_at(keys, depth), use_final_bias);
}

Array MLP::operator()(const Array& x) const {
  if (layers.empty()) throw ValueError("[nn.MLP] the MLP has no layers");
  // Checked here so a wrong input names the MLP, not its first Linear.
  const Array& w = layers.front().weight;
  detail::check_param_dtype("nn.MLP", "input", x, "weight", w);
  if (x.ndim() < 1 || x.shape().back() != w.shape()[1]) {
    detail::throw_input_shape("nn.MLP", "input", str_cat("(..., ", w.shape()[1], ")"), x.shape());
  }
  Array h = x;
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) h = activation(layers[i](h));
  return final_activation(layers.back()(h));
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_size, const Array& key,
                     const EmbeddingInit& init) {
  if (num_embeddings < 1 || embedding_size < 1) {
    throw ValueError(str_cat("[nn.Embedding] num_embeddings and embedding_size must be >= 1, got ",
                             num_embeddings, " and ", embedding_size));
  }
  const Shape shape{num_embeddings, embedding_size};
  switch (init.kind) {
    case EmbeddingInit::Kind::kNormal:
      if (!(init.scale >= 0.0)) {
        throw ValueError(str_cat("[nn.Embedding] normal init std must be >= 0, got ", init.scale));
      }
      detail::check_key("nn.Embedding", key);
      weight = random::normal(key, shape) * init.scale;
      break;
    case EmbeddingInit::Kind::kUniform:
      if (!(init.scale > 0.0)) {
        throw ValueError(
            str_cat("[nn.Embedding] uniform init scale must be > 0, got ", init.scale));
      }
      detail::check_key("nn.Embedding", key);
      weight = detail::uniform_init(key, shape, init.scale);
      break;
    case EmbeddingInit::Kind::kZeros:
      weight = zeros(shape);
      break;
  }
  if (init.padding_idx >= 0) {
    if (init.padding_idx >= num_embeddings) {
      throw ValueError(str_cat("[nn.Embedding] padding_idx must be in [0, ", num_embeddings,
                               "), got ", init.padding_idx));
    }
    const Array row = expand_dims(arange(static_cast<double>(num_embeddings), i32), 1);
    weight = where(row == init.padding_idx, zeros_like(weight), weight);
  }
}

Embedding Embedding::from_weight(const Array& weight, std::int64_t num_embeddings,
                                 std::int64_t embedding_size) {
  detail::check_floating_input("nn.Embedding", "weight", weight);
  const Shape& s = weight.shape();
  const bool match = s.size() == 2 && (num_embeddings < 0 || s[0] == num_embeddings) &&
                     (embedding_size < 0 || s[1] == embedding_size);
  if (!match) {
    auto dim = [](std::int64_t v, const char* n) {
      return v < 0 ? std::string(n) : std::to_string(v);
    };
    detail::throw_input_shape("nn.Embedding", "weight",
                              str_cat("(", dim(num_embeddings, "num_embeddings"), ", ",
                                      dim(embedding_size, "embedding_size"), ")"),
                              s);
  }
  Embedding e;
  e.weight = weight;
  return e;
}

Array Embedding::operator()(const Array& indices) const {
  if (indices.is_null()) throw ValueError("[nn.Embedding] indices is None");
  if (indices.dtype() != i32 && indices.dtype() != u32) {
    throw DTypeError(str_cat("[nn.Embedding] indices must be i32 or u32, got ",
                             name(indices.dtype()), " of shape ",
                             to_string(indices.shape())));
  }
  return take(weight, indices, 0);
}

LayerNorm::LayerNorm(std::vector<std::int64_t> shape_, double eps_, bool use_weight,
                     bool use_bias)
    : shape(std::move(shape_)), eps(eps_) {
  const Shape s(shape.begin(), shape.end());
  if (use_weight) weight = ones(s);
  if (use_bias) bias = zeros(s);
}

Array LayerNorm::operator()(const Array& x) const {
  const Axes axes = detail::trailing_axes("nn.LayerNorm", x, shape);
  detail::check_param_dtype("nn.LayerNorm", "input", x, "weight", weight);
  Array mu = mean(x, axes, true);
  Array centered = x - mu;
  Array var = mean(centered * centered, axes, true);
  Array out = centered * rsqrt(var + eps);
  if (!weight.is_null()) out = out * weight;
  if (!bias.is_null()) out = out + bias;
  return out;
}

Dropout::Dropout(double p_, bool inference_) : p(p_), inference(inference_) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw ValueError(str_cat("[nn.Dropout] p must be in [0, 1], got ", p));
  }
}

Array Dropout::operator()(const Array& x, const Array& key) const {
  return (*this)(x, key, inference);
}

Array Dropout::operator()(const Array& x, const Array& key, bool inference_) const {
  detail::check_floating_input("nn.Dropout", "input", x);
  if (inference_ || p == 0.0) return x;
  if (key.is_null()) {
    throw ValueError(
        "[nn.Dropout] a key is required in training mode (inference=false); pass a key "
        "or set inference=true");
  }
  detail::check_key("nn.Dropout", key);
  const double q = 1.0 - p;
  Array keep = random::bernoulli(key, q, x.shape());
  return where(keep, x / q, zeros_like(x));
}

}  // namespace kiln::nn
