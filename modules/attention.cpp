// MultiheadAttention: projections, a head axis moved next to the batch axes,
// batched matmuls for the logits and the weighted values, output projection.
#include "kiln/modules/attention.hpp"

#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/activations.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

using kiln::detail::str_cat;

// Swaps axes i and j of a.
Array swap_axes(const Array& a, std::int64_t i, std::int64_t j) {
  Axes perm(a.ndim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[i], perm[j]);
  return transpose(a, perm);
}

// (..., S, H * d) -> (..., H, S, d)
Array split_heads(const Array& x, std::int64_t heads) {
  Shape s = x.shape();
  const std::int64_t d = s.back() / heads;
  s.back() = heads;
  s.push_back(d);
  Array r = reshape(x, s);
  return swap_axes(r, r.ndim() - 3, r.ndim() - 2);
}

// (..., H, S, d) -> (..., S, H * d)
Array merge_heads(const Array& x) {
  Array t = swap_axes(x, x.ndim() - 3, x.ndim() - 2);
  Shape s(t.shape().begin(), t.shape().end() - 2);
  s.push_back(t.shape()[t.ndim() - 2] * t.shape().back());
  return reshape(t, s);
}

void check_seq(const char* what, const Array& a, const Linear& proj) {
  detail::check_param_dtype("nn.MultiheadAttention", what, a, "its projection's weight",
                            proj.weight);
  const std::int64_t size = proj.weight.shape()[1];
  if (a.ndim() < 2 || a.shape().back() != size) {
    detail::throw_input_shape("nn.MultiheadAttention", what, str_cat("(..., S, ", size, ")"),
                              a.shape());
  }
}

}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t heads, std::int64_t query_size,
                                       const Array& key, const MultiheadAttentionOptions& o)
    : dropout(o.dropout_p, o.inference), num_heads(heads) {
  if (heads < 1 || query_size < 1) {
    throw ValueError(str_cat("[nn.MultiheadAttention] num_heads and query_size must be >= 1, got ",
                             heads, " and ", query_size));
  }
  detail::check_key("nn.MultiheadAttention", key);
  auto or_default = [](std::int64_t v, std::int64_t d) { return v > 0 ? v : d; };
  const std::int64_t key_size = or_default(o.key_size, query_size);
  const std::int64_t value_size = or_default(o.value_size, query_size);
  const std::int64_t output_size = or_default(o.output_size, query_size);
  const std::int64_t qk = or_default(o.qk_size, query_size / heads);
  const std::int64_t vo = or_default(o.vo_size, query_size / heads);
  if (qk < 1 || vo < 1) {
    throw ValueError(str_cat("[nn.MultiheadAttention] query_size ", query_size,
                             " / num_heads ", heads, " is 0; set qk_size and vo_size"));
  }
  const Array keys = random::split(key, 4);
  query_proj = Linear(query_size, heads * qk, detail::key_at(keys, 0), o.use_query_bias);
  key_proj = Linear(key_size, heads * qk, detail::key_at(keys, 1), o.use_key_bias);
  value_proj = Linear(value_size, heads * vo, detail::key_at(keys, 2), o.use_value_bias);
  output_proj = Linear(heads * vo, output_size, detail::key_at(keys, 3), o.use_output_bias);
}

Array dot_product_attention_weights(const Array& q, const Array& k, const Array& mask) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back()));
  Array logits = matmul(q * scale, swap_axes(k, k.ndim() - 2, k.ndim() - 1));
  if (!mask.is_null()) {
    detail::check_mask("nn.dot_product_attention", mask, logits.shape(), "(..., Sq, Sk)");
    const double lowest = logits.dtype() == f64 ? std::numeric_limits<double>::lowest()
                                                : std::numeric_limits<float>::lowest();
    logits = where(mask, logits, full_like(logits, lowest));
  }
  return softmax(logits);
}

Array dot_product_attention(const Array& q, const Array& k, const Array& v,
                            const Array& mask) {
  return matmul(dot_product_attention_weights(q, k, mask), v);
}

AttentionHeads MultiheadAttention::project(const Array& query, const Array& key_,
                                           const Array& value) const {
  check_seq("query", query, query_proj);
  check_seq("key", key_, key_proj);
  check_seq("value", value, value_proj);
  if (key_.shape()[key_.ndim() - 2] != value.shape()[value.ndim() - 2]) {
    throw ShapeError(str_cat("[nn.MultiheadAttention] key ", to_string(key_.shape()),
                             " and value ", to_string(value.shape()),
                             " must have the same sequence length"));
  }
  return {split_heads(query_proj(query), num_heads),  // (..., H, Sq, qk)
          split_heads(key_proj(key_), num_heads),     // (..., H, Sk, qk)
          split_heads(value_proj(value), num_heads)};  // (..., H, Sk, vo)
}

Array MultiheadAttention::attend(const AttentionHeads& h, const Array& mask,
                                 const Array& key) const {
  if (!mask.is_null()) {
    // The logits' shape: the batch and head axes of q and k broadcast, then (Sq, Sk).
    const Shape& qs = h.q.shape();
    const Shape& ks = h.k.shape();
    Shape logits = broadcast_shapes("nn.MultiheadAttention", Shape(qs.begin(), qs.end() - 2),
                                    Shape(ks.begin(), ks.end() - 2));
    logits.push_back(qs[qs.size() - 2]);
    logits.push_back(ks[ks.size() - 2]);
    detail::check_mask("nn.MultiheadAttention", mask, logits, "(..., heads, Sq, Sk)");
  }
  // Dropout (training mode only) acts on the attention weights.
  Array weights = dropout(dot_product_attention_weights(h.q, h.k, mask), key);
  return output_proj(merge_heads(matmul(weights, h.v)));
}

Array MultiheadAttention::operator()(const Array& query, const Array& key_,
                                     const Array& value, const Array& mask,
                                     const Array& key) const {
  return attend(project(query, key_, value), mask, key);
}

}  // namespace kiln::nn
