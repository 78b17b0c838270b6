// RotaryPositionalEmbedding against numpy's evaluation of Equinox's formula,
// CausalSelfAttention and TransformerBlock against a straightforward
// composition of DSL ops, causality, finite-difference gradients, dropout keys,
// retraces under filter_jit, and the layers' error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <random>
#include <vector>

#include "check_close.hpp"
#include "error_text.hpp"
#include "finite_diff.hpp"

using namespace kiln;
using testing::check_close;
using testing::error_text;

namespace {

// (B, S, E) -> (B, H, S, E / H)
Array heads_of(const Array& a, std::int64_t h) {
  const Shape& s = a.shape();
  return transpose(reshape(a, {s[0], s[1], h, s[2] / h}), {0, 2, 1, 3});
}

// RoPE from its definition: angle p * theta^(-2i/d) via arange, exp, sin, cos.
Array rope_reference(const Array& x) {
  const std::int64_t t = x.shape()[x.ndim() - 2], d = x.shape().back();
  const Array inv_freq = exp(arange(static_cast<double>(d / 2), x.dtype()) *
                             (-2.0 * std::log(10000.0) / static_cast<double>(d)));
  const Array angle =
      expand_dims(arange(static_cast<double>(t), x.dtype()), 1) * expand_dims(inv_freq, 0);
  const std::vector<Array> h = split(x, 2, -1);
  return concatenate({h[0] * cos(angle) - h[1] * sin(angle), h[1] * cos(angle) + h[0] * sin(angle)},
                     -1);
}

Array linear_reference(const nn::Linear& l, const Array& x) {
  const Array y = matmul(x, transpose(l.weight));
  return l.bias.is_null() ? y : y + l.bias;
}

// Causal multi-head self-attention written out: x (B, S, E).
Array attention_reference(const nn::CausalSelfAttention& a, const Array& x) {
  const nn::MultiheadAttention& m = a.attention;
  const std::int64_t h = m.num_heads, b = x.shape()[0], s = x.shape()[1];
  Array q = heads_of(linear_reference(m.query_proj, x), h);
  Array k = heads_of(linear_reference(m.key_proj, x), h);
  const Array v = heads_of(linear_reference(m.value_proj, x), h);
  if (a.rotary) {
    q = rope_reference(q);
    k = rope_reference(k);
  }
  Array scores =
      matmul(q, transpose(k, {0, 1, 3, 2})) / std::sqrt(static_cast<double>(q.shape().back()));
  scores = where(tril(ones({s, s})) > 0.0, scores, full_like(scores, -1e30));
  const Array att = matmul(nn::softmax(scores), v);
  return linear_reference(m.output_proj, reshape(transpose(att, {0, 2, 1, 3}),
                                                 {b, s, att.shape()[1] * att.shape()[3]}));
}

Array layer_norm_reference(const nn::LayerNorm& n, const Array& x) {
  const Array c = x - mean(x, {-1}, true);
  return c / sqrt(mean(c * c, {-1}, true) + n.eps) * n.weight + n.bias;
}

Array block_reference(const nn::TransformerBlock& blk, const Array& x) {
  const Array h =
      x + attention_reference(blk.attention, layer_norm_reference(blk.attention_norm, x));
  const Array n = layer_norm_reference(blk.mlp_norm, h);
  return h + linear_reference(blk.mlp.layers[1], nn::gelu(linear_reference(blk.mlp.layers[0], n)));
}

template <class T>
T to_f64(const T& module) {
  return tree::map([](const Array& a) { return astype(a, f64); }, module);
}

}  // namespace

TEST_CASE(
    "RotaryPositionalEmbedding rotates halves as Equinox: golden values "
    "from numpy") {
  const nn::RotaryPositionalEmbedding rope(4);
  CHECK(rope.theta == 10000.0);
  // Position p rotates (x[i], x[i + 2]) by p * 10000^(-i/2): angles 1 and 0.01
  // at p = 1.
  const Array x = array<float>({1, 2, 3, 4, 1, 2, 3, 4, 0.5f, -1, 2, -0.25f}, {3, 4});
  const Array want = array<float>({1, 2, 3, 4,                                          //
                                   -1.98411065f, 1.95990067f, 2.4623779f, 4.01979967f,  //
                                   -2.02666827f, -0.99480034f, -0.37764496f, -0.26994867f},
                                  {3, 4});
  check_close(rope(x), want, 1e-6);
  // Leading axes are batch axes: each (seq, dim) slice is rotated the same way.
  const Array batched = stack({x, x * 2.0}, 0);
  check_close(rope(batched), stack({want, want * 2.0}, 0), 1e-6);
  // q.k after rotation depends only on the positions' difference.
  std::mt19937 gen(1);
  const Array v = testing::uniform_array(gen, {1, 8}, f32);
  const Array seq = broadcast_to(v, {6, 8});
  const Array r = nn::RotaryPositionalEmbedding(8)(seq);
  const Array dots = sum(r * roll(r, 1, 0), {-1});  // row p . row p-1
  const std::vector<float> d = dots.to_vector<float>();
  for (std::size_t p = 2; p < d.size(); ++p) CHECK(d[p] == doctest::Approx(d[1]).epsilon(1e-5));
}

TEST_CASE("causal_mask is true on and below the diagonal") {
  const std::vector<bool> want = {true, false, false, true, true, false, true, true, true};
  CHECK(nn::causal_mask(3).to_vector<bool>() == want);
  CHECK(nn::causal_mask(3).dtype() == bool_);
}

TEST_CASE(
    "CausalSelfAttention equals the written-out attention, with and "
    "without RoPE") {
  std::mt19937 gen(2);
  const Array x = testing::uniform_array(gen, {2, 5, 8}, f32);
  for (const bool rotary : {true, false}) {
    INFO("rotary " << rotary);
    const nn::CausalSelfAttention attn(2, 8, random::key(3), rotary);
    CHECK(attn.rotary.has_value() == rotary);
    check_close(attn(x), attention_reference(attn, x), 1e-5);
  }
  // Without RoPE it is MultiheadAttention with the causal mask.
  const nn::CausalSelfAttention plain(2, 8, random::key(3), false);
  check_close(plain(x), plain.attention(x, x, x, nn::causal_mask(5)), 1e-6);
  // An extra mask (here hiding key 0 from every query but the first) is
  // combined with the causal one.
  const Array pad =
      array<bool>({true, false, true, true, true}, {5}) | (expand_dims(arange(5.0, i32), 1) == 0);
  const Array both = pad & nn::causal_mask(5);
  check_close(plain(x, pad), plain.attention(x, x, x, both), 1e-6);
}

TEST_CASE("a future token does not change earlier outputs of a TransformerBlock") {
  const nn::TransformerBlock blk(8, 2, random::key(4));
  std::mt19937 gen(5);
  const Array x = testing::uniform_array(gen, {1, 5, 8}, f32);
  const Array changed = concatenate({slice_axis(x, 1, 0, 3), slice_axis(x, 1, 3, 5) + 1.0}, 1);
  const Array a = blk(x), b = blk(changed);
  check_close(slice_axis(b, 1, 0, 3), slice_axis(a, 1, 0, 3), 1e-6);
  CHECK(max(abs(slice_axis(b, 1, 3, 4) - slice_axis(a, 1, 3, 4))).item<float>() > 1e-3f);
}

TEST_CASE("TransformerBlock is pre-norm attention and a GELU MLP with residuals") {
  const nn::TransformerBlock blk(8, 2, random::key(6), {.mlp_size = 12});
  CHECK(to_string(blk.mlp.layers[0].weight.shape()) == "(12, 8)");
  CHECK(to_string(blk.attention.attention.query_proj.weight.shape()) == "(8, 8)");
  CHECK(blk.attention.attention.query_proj.bias.is_null());
  CHECK(blk.attention.rotary->embedding_size == 4);
  CHECK(nn::TransformerBlock(8, 2, random::key(6)).mlp.layers[0].weight.shape()[0] == 32);
  std::mt19937 gen(7);
  const Array x = testing::uniform_array(gen, {2, 3, 4, 8}, f32);  // two batch axes
  const Array want = reshape(block_reference(blk, reshape(x, {6, 4, 8})), {2, 3, 4, 8});
  check_close(blk(x), want, 1e-5);
  // With biases in every attention projection too.
  const nn::TransformerBlock biased(8, 4, random::key(8), {.attention_bias = true});
  CHECK_FALSE(biased.attention.attention.output_proj.bias.is_null());
  check_close(biased(reshape(x, {6, 4, 8})), block_reference(biased, reshape(x, {6, 4, 8})), 1e-5);
}

TEST_CASE("TransformerBlock gradients equal finite differences (f64)") {
  const nn::TransformerBlock blk =
      to_f64(nn::TransformerBlock(4, 2, random::key(9), {.mlp_size = 6}));
  std::mt19937 gen(10);
  const Array x = testing::uniform_array(gen, {1, 3, 4});
  const Array r = testing::uniform_array(gen, {1, 3, 4});
  testing::check_finite_differences(
      [&](const std::vector<Array>& p) {
        nn::TransformerBlock m = blk;
        m.attention.attention.query_proj.weight = p[1];
        m.attention.attention.key_proj.weight = p[2];
        m.mlp.layers[0].weight = p[3];
        m.attention_norm.weight = p[4];
        return sum(m(p[0]) * r);
      },
      {x, blk.attention.attention.query_proj.weight, blk.attention.attention.key_proj.weight,
       blk.mlp.layers[0].weight, blk.attention_norm.weight},
      1e-5);
}

TEST_CASE("TransformerBlock dropout: keyed in training, the identity in inference") {
  std::mt19937 gen(11);
  const Array x = testing::uniform_array(gen, {2, 4, 8}, f32);
  const nn::TransformerBlock train(8, 2, random::key(12), {.dropout_p = 0.5});
  const nn::TransformerBlock infer(8, 2, random::key(12), {.dropout_p = 0.5, .inference = true});
  const nn::TransformerBlock none(8, 2, random::key(12));
  check_close(infer(x), none(x), 1e-6);
  const Array a = train(x, random::key(1));
  check_close(train(x, random::key(1)), a,
              1e-6);  // the same key drops the same units
  CHECK(max(abs(a - none(x))).item<float>() > 1e-2f);
  CHECK(max(abs(a - train(x, random::key(2)))).item<float>() > 1e-2f);
  CHECK(error_text([&] { train(x); }).find("[nn.Dropout] a key is required") == 0);
}

TEST_CASE("a jitted TransformerBlock traces once per input shape and matches eager") {
  const nn::TransformerBlock blk(8, 2, random::key(13), {.dropout_p = 0.25});
  auto fwd = filter_jit(
      [](const nn::TransformerBlock& b, const Array& x, const Array& k) { return b(x, k); });
  std::mt19937 gen(14);
  for (int i = 0; i < 3; ++i) {
    const Array x = testing::uniform_array(gen, {2, 6, 8}, f32);
    const Array k = random::key(static_cast<std::uint32_t>(i));
    check_close(fwd(blk, x, k), blk(x, k), 1e-5);
  }
  CHECK(fwd.trace_count() == 1);
  const Array x7 = testing::uniform_array(gen, {2, 7, 8}, f32);
  check_close(fwd(blk, x7, random::key(5)), blk(x7, random::key(5)), 1e-5);
  CHECK(fwd.trace_count() == 2);
  // Rebuilding the block with the same configuration keeps the cache key.
  (void)fwd(nn::TransformerBlock(8, 2, random::key(99), {.dropout_p = 0.25}), x7, random::key(5));
  CHECK(fwd.trace_count() == 2);
}

TEST_CASE("transformer layer errors name the layer, the argument and both shapes") {
  CHECK(error_text([] { nn::RotaryPositionalEmbedding(5); }) ==
        "[nn.RotaryPositionalEmbedding] embedding_size must be even and >= 2, "
        "got 5");
  CHECK(error_text([] {
          nn::RotaryPositionalEmbedding(4)(ones({3, 6}));
        }) ==
        "[nn.RotaryPositionalEmbedding] expected input (..., seq, 4), "
        "got (3, 6)");
  CHECK(error_text([] {
          nn::RotaryPositionalEmbedding(4)(ones({3, 4}, i32));
        })
            .find("[nn.RotaryPositionalEmbedding] input must be floating, got "
                  "i32") == 0);
  CHECK(error_text([] { nn::CausalSelfAttention(2, 6, random::key(0)); }) ==
        "[nn.CausalSelfAttention] rotary embeddings need an even qk_size, got "
        "3 (embed_size 6 "
        "/ num_heads 2)");
  const nn::CausalSelfAttention attn(2, 16, random::key(0));
  CHECK(error_text([&] {
          attn(ones({2, 8, 5}));
        }) == "[nn.CausalSelfAttention] expected input (..., S, 16), got (2, 8, 5)");
  CHECK(error_text([&] {
          attn(ones({2, 8, 16}), ones({9, 9}) > 0.0);
        }) ==
        "[nn.CausalSelfAttention] mask (9, 9) does not broadcast to (2, "
        "2, 8, 8) = (..., "
        "heads, S, S)");
  const nn::MultiheadAttention mha(2, 16, random::key(0));
  const Array x = ones({2, 8, 16});
  CHECK(error_text([&] {
          mha(x, x, x, ones({9, 9}) > 0.0);
        }) ==
        "[nn.MultiheadAttention] mask (9, 9) does not broadcast to (2, "
        "2, 8, 8) = (..., "
        "heads, Sq, Sk)");
  CHECK(error_text([&] {
          mha(x, x, x, ones({8, 8}));
        }) == "[nn.MultiheadAttention] mask must be bool, got f32 of shape (8, 8)");
  CHECK(error_text([&] {
          nn::dot_product_attention(x, x, x, ones({3, 8}) > 0.0);
        }) ==
        "[nn.dot_product_attention] mask (3, 8) does not broadcast to "
        "(2, 8, 8) = (..., Sq, "
        "Sk)");
  const nn::TransformerBlock blk(16, 2, random::key(0));
  CHECK(error_text([&] {
          blk(ones({8, 12}));
        }) == "[nn.TransformerBlock] expected input (..., S, 16), got (8, 12)");
  CHECK(error_text([&] { blk(x, ones({2})); })
            .find("[nn.TransformerBlock] expected a PRNG key (u32, shape "
                  "(2,)), got f32") == 0);
}
