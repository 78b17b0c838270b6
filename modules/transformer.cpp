// RotaryPositionalEmbedding, causal_mask, CausalSelfAttention and
// TransformerBlock, written with DSL ops on top of MultiheadAttention.
#include "kiln/modules/transformer.hpp"

#include <cmath>
#include <vector>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/activations.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {

using kiln::detail::str_cat;

RotaryPositionalEmbedding::RotaryPositionalEmbedding(std::int64_t size, double theta_)
    : embedding_size(size), theta(theta_) {
  if (size < 2 || size % 2 != 0) {
    throw ValueError(
        str_cat("[nn.RotaryPositionalEmbedding] embedding_size "
                "must be even and >= 2, got ",
                size));
  }
  if (!(theta > 0.0)) {
    throw ValueError(str_cat("[nn.RotaryPositionalEmbedding] theta must be > 0, got ", theta));
  }
}

Array RotaryPositionalEmbedding::operator()(const Array& x) const {
  constexpr const char* kModule = "nn.RotaryPositionalEmbedding";
  detail::check_floating_input(kModule, "input", x);
  if (x.ndim() < 2 || x.shape().back() != embedding_size) {
    detail::throw_input_shape(kModule, "input", str_cat("(..., seq, ", embedding_size, ")"),
                              x.shape());
  }
  // The angles depend only on the (static) shape: computed on the host in f64,
  // so they are exact for long sequences and enter a trace as constants.
  const std::int64_t seq = x.shape()[x.ndim() - 2], half = embedding_size / 2;
  std::vector<double> c(static_cast<std::size_t>(seq * half)), s(c.size());
  for (std::int64_t p = 0; p < seq; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(p) *
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(embedding_size));
      c[static_cast<std::size_t>(p * half + i)] = std::cos(angle);
      s[static_cast<std::size_t>(p * half + i)] = std::sin(angle);
    }
  }
  const Array cos_t = astype(array<double>(c, {seq, half}), x.dtype());
  const Array sin_t = astype(array<double>(s, {seq, half}), x.dtype());
  const std::vector<Array> halves = split(x, 2, -1);
  const Array& x1 = halves[0];
  const Array& x2 = halves[1];
  return concatenate({x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t}, -1);
}

Array causal_mask(std::int64_t seq) {
  if (seq < 1) throw ValueError(str_cat("[nn.causal_mask] seq must be >= 1, got ", seq));
  return tril(ones({seq, seq})) > 0.0;
}

CausalSelfAttention::CausalSelfAttention(std::int64_t num_heads, std::int64_t embed_size,
                                         const Array& key, bool use_rotary,
                                         const MultiheadAttentionOptions& options)
    : attention(num_heads, embed_size, key, options) {
  if (use_rotary) {
    const std::int64_t qk = attention.query_proj.weight.shape()[0] / num_heads;
    if (qk % 2 != 0) {
      throw ValueError(
          str_cat("[nn.CausalSelfAttention] rotary embeddings need an even "
                  "qk_size, got ",
                  qk, " (embed_size ", embed_size, " / num_heads ", num_heads, ")"));
    }
    rotary = RotaryPositionalEmbedding(qk);
  }
}

Array CausalSelfAttention::operator()(const Array& x, const Array& mask, const Array& key) const {
  constexpr const char* kModule = "nn.CausalSelfAttention";
  const Array& wq = attention.query_proj.weight;
  const std::int64_t embed = wq.shape()[1];
  detail::check_param_dtype(kModule, "input", x, "query_proj.weight", wq);
  if (x.ndim() < 2 || x.shape().back() != embed) {
    detail::throw_input_shape(kModule, "input", str_cat("(..., S, ", embed, ")"), x.shape());
  }
  AttentionHeads h = attention.project(x, x, x);
  if (rotary) {
    h.q = (*rotary)(h.q);
    h.k = (*rotary)(h.k);
  }
  const std::int64_t seq = x.shape()[x.ndim() - 2];
  Array m = causal_mask(seq);
  if (!mask.is_null()) {
    Shape logits(h.q.shape().begin(), h.q.shape().end() - 1);
    logits.push_back(seq);
    detail::check_mask(kModule, mask, logits, "(..., heads, S, S)");
    m = logical_and(m, mask);
  }
  return attention.attend(h, m, key);
}

TransformerBlock::TransformerBlock(std::int64_t embed_size, std::int64_t num_heads,
                                   const Array& key, const TransformerBlockOptions& o)
    : attention_norm({embed_size}), mlp_norm({embed_size}), dropout(o.dropout_p, o.inference) {
  detail::check_key("nn.TransformerBlock", key);
  const Array keys = random::split(key, 2);
  MultiheadAttentionOptions mo;
  mo.use_query_bias = mo.use_key_bias = mo.use_value_bias = mo.use_output_bias = o.attention_bias;
  mo.dropout_p = o.dropout_p;
  mo.inference = o.inference;
  attention = CausalSelfAttention(num_heads, embed_size, detail::key_at(keys, 0), o.rotary, mo);
  const std::int64_t hidden = o.mlp_size > 0 ? o.mlp_size : 4 * embed_size;
  mlp = MLP(embed_size, embed_size, hidden, 1, detail::key_at(keys, 1), gelu);
}

Array TransformerBlock::operator()(const Array& x, const Array& key) const {
  constexpr const char* kModule = "nn.TransformerBlock";
  const Array& w = mlp.layers.front().weight;
  const std::int64_t embed = w.shape()[1];
  detail::check_param_dtype(kModule, "input", x, "mlp.layers[0].weight", w);
  if (x.ndim() < 2 || x.shape().back() != embed) {
    detail::throw_input_shape(kModule, "input", str_cat("(..., S, ", embed, ")"), x.shape());
  }
  // Three independent dropout keys (attention weights, two residual branches),
  // split only when dropout is live so inference needs no key.
  Array k_attn, k_res1, k_res2;
  if (!key.is_null()) {
    detail::check_key(kModule, key);
    const Array keys = random::split(key, 3);
    k_attn = detail::key_at(keys, 0);
    k_res1 = detail::key_at(keys, 1);
    k_res2 = detail::key_at(keys, 2);
  }
  const Array h = x + dropout(attention(attention_norm(x), Array(), k_attn), k_res1);
  return h + dropout(mlp(mlp_norm(h)), k_res2);
}

}  // namespace kiln::nn
