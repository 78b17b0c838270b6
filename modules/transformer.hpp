// Decoder-transformer pieces of kiln::nn, batched like the other layers
// (leading axes are batch axes): rotary positional embeddings (eqx.nn.
// RotaryPositionalEmbedding), the causal mask, causal self-attention built on
// MultiheadAttention, and a pre-norm TransformerBlock (GPT-2's layout).
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/modules/attention.hpp"
#include "kiln/modules/layers.hpp"

namespace kiln::nn {

// Rotates the pairs (x[..., i], x[..., i + d/2]) at sequence position p by the
// angle p * theta^(-2i/d), Equinox's rotate-half convention:
//   [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin].
// x: (..., seq, embedding_size) -> same shape. No parameters (both fields are
// static), so q.k of rotated vectors depends only on the positions' difference.
struct RotaryPositionalEmbedding {
  std::int64_t embedding_size = 0;  // even
  double theta = 10000.0;
  KILN_MODULE(RotaryPositionalEmbedding, embedding_size, theta);

  RotaryPositionalEmbedding() = default;
  explicit RotaryPositionalEmbedding(std::int64_t embedding_size, double theta = 10000.0);
  Array operator()(const Array& x) const;
};

// (seq, seq) bool, true where key position j <= query position i: each position
// attends to itself and to the past only.
Array causal_mask(std::int64_t seq);

// Self-attention over x (..., S, embed_size) where position i sees positions
// 0..i only; with `rotary`, q and k are rotated per head (RoPE) after
// projection.
struct CausalSelfAttention {
  MultiheadAttention attention;
  std::optional<RotaryPositionalEmbedding> rotary;  // over qk_size
  KILN_MODULE(CausalSelfAttention, attention, rotary);

  CausalSelfAttention() = default;
  CausalSelfAttention(std::int64_t num_heads, std::int64_t embed_size, const Array& key,
                      bool use_rotary = true, const MultiheadAttentionOptions& options = {});
  // mask (optional, e.g. padding): bool, combined with the causal mask, so it
  // must broadcast to (..., heads, S, S). key: for dropout in training mode.
  Array operator()(const Array& x, const Array& mask = Array(), const Array& key = Array()) const;
};

struct TransformerBlockOptions {
  std::int64_t mlp_size = 0;    // hidden width of the MLP; 0 means 4 * embed_size
  bool rotary = true;           // RoPE on q and k
  bool attention_bias = false;  // biases of the q, k, v and output projections
  // Dropout on the attention weights and on both residual branches (before the
  // add); `inference` (static) turns all of it off.
  double dropout_p = 0.0;
  bool inference = false;
};

// Pre-norm block: h = x + drop(attn(LayerNorm(x))); h + drop(MLP(LayerNorm(h)))
// with a GELU MLP embed -> mlp_size -> embed. x: (..., S, embed_size).
struct TransformerBlock {
  LayerNorm attention_norm;
  CausalSelfAttention attention;
  LayerNorm mlp_norm;
  MLP mlp;
  Dropout dropout{0.0, true};  // on the residual branches
  KILN_MODULE(TransformerBlock, attention_norm, attention, mlp_norm, mlp, dropout);

  TransformerBlock() = default;
  TransformerBlock(std::int64_t embed_size, std::int64_t num_heads, const Array& key,
                   const TransformerBlockOptions& options = {});
  // key: a PRNG key, needed only for dropout in training mode.
  Array operator()(const Array& x, const Array& key = Array()) const;
};

}  // namespace kiln::nn
