// A small GPT (decoder-only transformer) over characters, written with kiln's
// public DSL as a tree of KILN_MODULE structs:
//
//   tokens (B, T) i32 -> nn::Embedding -> n_layers x Block -> nn::LayerNorm -> nn::Linear
//   Block: x + attention(LayerNorm(x)), then h + MLP(LayerNorm(h))   (pre-norm)
//
// Positions enter only through rotary position embeddings (RoPE) on the queries
// and keys, so the model has no position table and any T works. The causal mask
// is tril(ones(T, T)) applied with `where`.
#pragma once

#include <cmath>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <vector>

namespace chargpt {

struct ModelConfig {
  std::int64_t vocab_size = 0;
  std::int64_t d_model = 64;
  std::int64_t n_heads = 2;
  std::int64_t n_layers = 2;
  std::int64_t mlp_ratio = 4;
};

// Rotary position embedding, the "rotate-half" form (GPT-NeoX, LLaMA in Hugging
// Face): the head dimension is split in halves x1 = x[..., :d/2], x2 = x[..., d/2:],
// and each pair (x1[i], x2[i]) at position p is rotated by the angle
// p * theta_i, theta_i = 10000^(-2i/d):
//   x1' = x1 cos - x2 sin,  x2' = x1 sin + x2 cos.
// q.k then depends on the positions only through their difference.
// x: (B, H, T, d) with d even.
inline kiln::Array rope(const kiln::Array& x) {
  using namespace kiln;
  const std::int64_t t = x.shape()[2], d = x.shape()[3], half = d / 2;
  const Array inv_freq =
      exp(arange(static_cast<double>(half), f32) * (-2.0 * std::log(10000.0) / double(d)));
  const Array angle = expand_dims(arange(static_cast<double>(t), f32), 1) *
                      expand_dims(inv_freq, 0);  // (T, d/2)
  const Array c = cos(angle), s = sin(angle);
  const std::vector<Array> halves = split(x, 2, -1);
  const Array& x1 = halves[0];
  const Array& x2 = halves[1];
  return concatenate({x1 * c - x2 * s, x1 * s + x2 * c}, -1);
}

// The causal mask: true where key position j <= query position i.
inline kiln::Array causal_mask(std::int64_t t) {
  return kiln::tril(kiln::ones({t, t})) > 0.0;
}

struct Block {
  kiln::nn::LayerNorm ln1, ln2;
  kiln::nn::Linear qkv, proj;  // d -> 3d (q, k, v), d -> d
  kiln::nn::Linear fc1, fc2;   // d -> ratio*d -> d
  std::int64_t n_heads = 1;
  KILN_MODULE(Block, ln1, ln2, qkv, proj, fc1, fc2, n_heads);

  static Block init(const ModelConfig& c, const kiln::Array& key) {
    using namespace kiln;
    const Array k = random::split(key, 4);
    const std::int64_t d = c.d_model, hidden = c.mlp_ratio * c.d_model;
    return {nn::LayerNorm({d}),
            nn::LayerNorm({d}),
            nn::Linear(d, 3 * d, random::subkey(k, 0)),
            nn::Linear(d, d, random::subkey(k, 1)),
            nn::Linear(d, hidden, random::subkey(k, 2)),
            nn::Linear(hidden, d, random::subkey(k, 3)),
            c.n_heads};
  }

  // x: (B, T, d); mask: (T, T) bool.
  kiln::Array operator()(const kiln::Array& x, const kiln::Array& mask) const {
    using namespace kiln;
    const std::int64_t b = x.shape()[0], t = x.shape()[1], d = x.shape()[2];
    const std::int64_t dh = d / n_heads;
    const std::vector<Array> parts = split(qkv(ln1(x)), 3, -1);  // 3 x (B, T, d)
    auto heads = [&](const Array& a) {  // (B, T, d) -> (B, H, T, dh)
      return transpose(reshape(a, {b, t, n_heads, dh}), {0, 2, 1, 3});
    };
    const Array q = rope(heads(parts[0])), k = rope(heads(parts[1])), v = heads(parts[2]);
    Array scores = matmul(q, transpose(k, {0, 1, 3, 2})) * (1.0 / std::sqrt(double(dh)));
    scores = where(mask, scores, full({t, t}, -1e9));  // (B, H, T, T)
    const Array att = matmul(nn::softmax(scores), v);  // (B, H, T, dh)
    const Array h = x + proj(reshape(transpose(att, {0, 2, 1, 3}), {b, t, d}));
    return h + fc2(nn::gelu(fc1(ln2(h))));
  }
};

struct Gpt {
  kiln::nn::Embedding embed;
  std::vector<Block> blocks;
  kiln::nn::LayerNorm ln_f;
  kiln::nn::Linear head;
  KILN_MODULE(Gpt, embed, blocks, ln_f, head);

  static Gpt init(const ModelConfig& c, const kiln::Array& key) {
    using namespace kiln;
    if (c.d_model % c.n_heads != 0 || (c.d_model / c.n_heads) % 2 != 0) {
      throw ValueError("[model] d_model / n_heads must be an even integer (RoPE rotates pairs)");
    }
    const Array k = random::split(key, c.n_layers + 2);
    Gpt g;
    g.embed = nn::Embedding(c.vocab_size, c.d_model, random::subkey(k, 0));
    for (std::int64_t i = 0; i < c.n_layers; ++i) {
      g.blocks.push_back(Block::init(c, random::subkey(k, i + 2)));
    }
    g.ln_f = nn::LayerNorm({c.d_model});
    g.head = nn::Linear(c.d_model, c.vocab_size, random::subkey(k, 1));
    return g;
  }

  // tokens: (B, T) i32 -> logits (B, T, vocab); position i sees tokens 0..i.
  kiln::Array operator()(const kiln::Array& tokens) const {
    const kiln::Array mask = causal_mask(tokens.shape()[1]);
    kiln::Array x = embed(tokens);
    for (const Block& b : blocks) x = b(x, mask);
    return head(ln_f(x));
  }
};

}  // namespace chargpt
