// A small GPT (decoder-only transformer) over characters, written with kiln's
// public DSL as a tree of KILN_MODULE structs:
//
//   tokens (B, T) i32 -> nn::Embedding -> n_layers x nn::TransformerBlock
//                     -> nn::LayerNorm -> nn::Linear
//   nn::TransformerBlock: x + attention(LayerNorm(x)), then h + MLP(LayerNorm(h))
//   (pre-norm, causal self-attention, GELU MLP)
//
// Positions enter only through rotary position embeddings (RoPE, nn::
// RotaryPositionalEmbedding inside the blocks' attention) on the queries and
// keys, so the model has no position table and any T works.
#pragma once

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

struct Gpt {
  kiln::nn::Embedding embed;
  std::vector<kiln::nn::TransformerBlock> blocks;
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
      // Biased q, k, v and output projections, as GPT-2's.
      g.blocks.emplace_back(c.d_model, c.n_heads, random::subkey(k, i + 2),
                            nn::TransformerBlockOptions{.mlp_size = c.mlp_ratio * c.d_model,
                                                        .attention_bias = true});
    }
    g.ln_f = nn::LayerNorm({c.d_model});
    g.head = nn::Linear(c.d_model, c.vocab_size, random::subkey(k, 1));
    return g;
  }

  // tokens: (B, T) i32 -> logits (B, T, vocab); position i sees tokens 0..i.
  kiln::Array operator()(const kiln::Array& tokens) const {
    kiln::Array x = embed(tokens);
    for (const kiln::nn::TransformerBlock& b : blocks) x = b(x);
    return head(ln_f(x));
  }
};

}  // namespace chargpt
