// Multi-head dot-product attention (eqx.nn.MultiheadAttention), batched:
// query (..., Sq, query_size), key (..., Sk, key_size), value (..., Sk,
// value_size) -> (..., Sq, output_size).
#pragma once

#include <cstdint>

#include "kiln/modules/layers.hpp"

namespace kiln::nn {

// Sizes default as in Equinox: key/value/output size = query_size,
// qk_size = vo_size = query_size / num_heads. No projection has a bias by default.
struct MultiheadAttentionOptions {
  std::int64_t key_size = 0;
  std::int64_t value_size = 0;
  std::int64_t output_size = 0;
  std::int64_t qk_size = 0;
  std::int64_t vo_size = 0;
  bool use_query_bias = false;
  bool use_key_bias = false;
  bool use_value_bias = false;
  bool use_output_bias = false;
  double dropout_p = 0.0;
  bool inference = false;
};

// The projected inputs with a head axis: q, k (..., H, S, qk_size), v (..., H,
// S, vo_size). Exposed so a caller can transform q and k between projection and
// attention (rotary embeddings; Equinox's process_heads).
struct AttentionHeads {
  Array q, k, v;
};

struct MultiheadAttention {
  Linear query_proj;   // query_size -> num_heads * qk_size
  Linear key_proj;     // key_size -> num_heads * qk_size
  Linear value_proj;   // value_size -> num_heads * vo_size
  Linear output_proj;  // num_heads * vo_size -> output_size
  Dropout dropout{0.0, true};  // on the attention weights
  std::int64_t num_heads = 1;
  KILN_MODULE(MultiheadAttention, query_proj, key_proj, value_proj, output_proj, dropout,
              num_heads);

  MultiheadAttention() = default;
  MultiheadAttention(std::int64_t num_heads, std::int64_t query_size, const Array& key,
                     const MultiheadAttentionOptions& options = {});
  // mask: bool, broadcastable to (..., num_heads, Sq, Sk); false hides a key.
  // key (PRNG) is needed only for dropout in training mode.
  Array operator()(const Array& query, const Array& key_, const Array& value,
                   const Array& mask = Array(), const Array& key = Array()) const;
  // The two halves of operator(): checked projections split into heads, then
  // the (masked, dropped-out) attention and the output projection.
  AttentionHeads project(const Array& query, const Array& key_, const Array& value) const;
  Array attend(const AttentionHeads& heads, const Array& mask = Array(),
               const Array& key = Array()) const;
};

// softmax(q k^T / sqrt(d)) over the last axis (the attention weights).
Array dot_product_attention_weights(const Array& q, const Array& k,
                                    const Array& mask = Array());
// softmax(q k^T / sqrt(d) masked) v over the last two axes; q (..., Sq, d),
// k (..., Sk, d), v (..., Sk, dv). Masked logits get the dtype's lowest value.
Array dot_product_attention(const Array& q, const Array& k, const Array& v,
                            const Array& mask = Array());

}  // namespace kiln::nn
