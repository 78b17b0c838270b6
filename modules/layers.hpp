// Dense layers of kiln::nn as typed pytrees: Linear, MLP, Embedding,
// LayerNorm, Dropout. Parameters and their layouts follow Equinox (Linear
// weight is (out, in)); initialisation follows Equinox from a kiln::random key
// (uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)), keys split as Equinox splits
// them). Unlike Equinox (which vmaps), every layer takes batched input: leading
// axes are batch axes.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/modules/activations.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

// y = x @ weight^T + bias, for x (..., in_features) -> (..., out_features).
struct Linear {
  Array weight;  // (out_features, in_features)
  Array bias;    // (out_features,), or None without bias
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  KILN_MODULE(Linear, weight, bias, in_features, out_features);

  Linear() = default;
  Linear(std::int64_t in_features, std::int64_t out_features, const Array& key,
         bool use_bias = true);
  Array operator()(const Array& x) const;
};

// depth hidden layers of width_size: Linear, activation, ..., Linear,
// final_activation (eqx.nn.MLP). depth 0 is a single Linear.
struct MLP {
  std::vector<Linear> layers;
  Activation activation = relu;
  Activation final_activation = identity;
  KILN_MODULE(MLP, layers, activation, final_activation);

  MLP() = default;
  MLP(std::int64_t in_size, std::int64_t out_size, std::int64_t width_size,
      std::int64_t depth, const Array& key, Activation activation = relu,
      Activation final_activation = identity, bool use_bias = true,
      bool use_final_bias = true);
  Array operator()(const Array& x) const;
};

// How Embedding fills its f32 weight: normal(std) (the default: standard normal,
// as Equinox), uniform(scale) in [-scale, scale), or zeros() (needs no key).
// with_padding_idx(i) also zeroes row i at initialisation (PyTorch's
// padding_idx, without masking that row's gradient).
struct EmbeddingInit {
  enum class Kind { kNormal, kUniform, kZeros };
  Kind kind = Kind::kNormal;
  double scale = 1.0;             // normal: the standard deviation; uniform: the bound
  std::int64_t padding_idx = -1;  // < 0: none

  static EmbeddingInit normal(double std = 1.0) { return {Kind::kNormal, std}; }
  static EmbeddingInit uniform(double scale) { return {Kind::kUniform, scale}; }
  static EmbeddingInit zeros() { return {Kind::kZeros, 0.0}; }
  EmbeddingInit with_padding_idx(std::int64_t i) const {
    EmbeddingInit c = *this;
    c.padding_idx = i;
    return c;
  }
};

// Rows of `weight` looked up by integer indices: (...) -> (..., embedding_size).
struct Embedding {
  Array weight;  // (num_embeddings, embedding_size)
  KILN_MODULE(Embedding, weight);

  Embedding() = default;
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_size, const Array& key,
            const EmbeddingInit& init = {});
  // Uses `weight` (floating, 2-D) as the table, e.g. pretrained vectors; sizes
  // >= 0 must match its shape (eqx.nn.Embedding(weight=...)).
  static Embedding from_weight(const Array& weight, std::int64_t num_embeddings = -1,
                               std::int64_t embedding_size = -1);
  Array operator()(const Array& indices) const;
};

// Normalises over the trailing `shape` axes: (x - mean) / sqrt(var + eps) *
// weight + bias (eqx.nn.LayerNorm; weight ones, bias zeros): nn::LayerNorm({64}).
struct LayerNorm {
  Array weight;  // `shape`, or None
  Array bias;    // `shape`, or None
  std::vector<std::int64_t> shape;
  double eps = 1e-5;
  KILN_MODULE(LayerNorm, weight, bias, shape, eps);

  LayerNorm() = default;
  explicit LayerNorm(std::vector<std::int64_t> shape, double eps = 1e-5,
                     bool use_weight = true, bool use_bias = true);
  Array operator()(const Array& x) const;
};

// Zeroes each element with probability p and scales the rest by 1 / (1 - p);
// identity when `inference` (a static: switching it retraces) or p == 0.
// Training needs a key (eqx.nn.Dropout).
struct Dropout {
  double p = 0.5;
  bool inference = false;
  KILN_MODULE(Dropout, p, inference);

  Dropout() = default;
  explicit Dropout(double p, bool inference = false);
  Array operator()(const Array& x, const Array& key = Array()) const;
  // Overrides the stored flag for this call.
  Array operator()(const Array& x, const Array& key, bool inference) const;
};

}  // namespace kiln::nn
