// The LibTorch peer of examples/char_transformer (case (f) of bench/peers.py):
// the same character-level GPT, the same sizes, optimizer and batch, trained for
// --steps steps; prints the median wall time per step as one JSON line.
//
// Mirrored from examples/char_transformer/model.hpp and kiln::nn:
//   tokens (B, T) -> Embedding(V, d) (N(0, 1) init) -> n_layers x block
//     -> LayerNorm(d) -> Linear(d, V)
//   block (pre-norm, GPT-2 layout): h = x + attn(LayerNorm(x)); h + MLP(LayerNorm(h))
//   attn: separate biased q, k, v, output projections (d -> d), H heads of
//     d / H; rotary embeddings on q and k (rotate-half: the pair (x[i], x[i + d/2])
//     at position p turned by p * 10000^(-2i/d)); logits (q / sqrt(d/H)) k^T with
//     the causal mask applied as float's lowest value, softmax, @ v, merged heads
//   MLP: Linear(d, 4d), GELU (tanh approximation), Linear(4d, d)
//   LayerNorm eps 1e-5 with weight and bias; Linear init U(+-1/sqrt(in)) (LibTorch's
//   default init is that bound as well)
//   loss: softmax cross entropy of the next character, mean over B * T
//   Adam lr 3e-3, betas (0.9, 0.999), eps 1e-8, no weight decay (optim::adam)
//   batch: B windows of T ids at uniform random offsets in [0, n - T), targets
//     shifted by one, drawn each step (torch::randint + index, as the kiln step
//     draws them inside its jitted function)
// Defaults as the example's: context 32, d_model 64, 2 heads, 2 layers, batch 16.
// Differences: LibTorch eager (no tracing, no fusion); the PRNG streams differ, so
// the batches and initial weights are not the same numbers (the same
// distributions). Timing as the example's: wall time of each loop iteration after
// the first two, median; each iteration ends by reading the loss on the host.
//   build/bench/torch_char_transformer [--corpus FILE] [--steps N] [--batch-size B]
//       [--context T] [--d-model D] [--heads H] [--layers L] [--lr LR] [--seed S]
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef KILN_CHAR_CORPUS
#define KILN_CHAR_CORPUS "examples/char_transformer/corpus.txt"
#endif

namespace {

struct Config {
  std::string corpus = KILN_CHAR_CORPUS;
  std::int64_t steps = 300;
  std::int64_t batch = 16;
  std::int64_t context = 32;
  std::int64_t d_model = 64;
  std::int64_t heads = 2;
  std::int64_t layers = 2;
  double lr = 3e-3;
  std::uint64_t seed = 0;
};

// (S, d/2) cos and sin of p * 10000^(-2i/d), computed in f64 as kiln does.
std::pair<torch::Tensor, torch::Tensor> rotary_tables(std::int64_t seq, std::int64_t dim) {
  const std::int64_t half = dim / 2;
  std::vector<double> c(static_cast<std::size_t>(seq * half)), s(c.size());
  for (std::int64_t p = 0; p < seq; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) *
                           std::pow(10000.0, -2.0 * static_cast<double>(i) /
                                                 static_cast<double>(dim));
      c[static_cast<std::size_t>(p * half + i)] = std::cos(angle);
      s[static_cast<std::size_t>(p * half + i)] = std::sin(angle);
    }
  }
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  return {torch::from_blob(c.data(), {seq, half}, opts).to(torch::kFloat32),
          torch::from_blob(s.data(), {seq, half}, opts).to(torch::kFloat32)};
}

// x (..., S, dh): [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin].
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto halves = x.chunk(2, -1);
  const torch::Tensor& x1 = halves[0];
  const torch::Tensor& x2 = halves[1];
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t d, std::int64_t heads_)
      : heads(heads_),
        ln1(register_module("ln1", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({d}).eps(1e-5)))),
        q(register_module("q", torch::nn::Linear(d, d))),
        k(register_module("k", torch::nn::Linear(d, d))),
        v(register_module("v", torch::nn::Linear(d, d))),
        o(register_module("o", torch::nn::Linear(d, d))),
        ln2(register_module("ln2", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({d}).eps(1e-5)))),
        fc1(register_module("fc1", torch::nn::Linear(d, 4 * d))),
        fc2(register_module("fc2", torch::nn::Linear(4 * d, d))) {}

  // x (B, S, d); mask (S, S) bool, true where a key is visible.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask,
                        const torch::Tensor& cos, const torch::Tensor& sin) {
    const std::int64_t b = x.size(0), s = x.size(1), d = x.size(2), dh = d / heads;
    auto split = [&](const torch::Tensor& t) { return t.view({b, s, heads, dh}).transpose(1, 2); };
    const torch::Tensor a = ln1(x);
    const torch::Tensor qh = rotate(split(q(a)), cos, sin);
    const torch::Tensor kh = rotate(split(k(a)), cos, sin);
    const torch::Tensor vh = split(v(a));
    torch::Tensor logits =
        torch::matmul(qh * (1.0 / std::sqrt(static_cast<double>(dh))), kh.transpose(-2, -1));
    logits = logits.masked_fill(mask.logical_not(), std::numeric_limits<float>::lowest());
    const torch::Tensor att = torch::matmul(torch::softmax(logits, -1), vh);
    const torch::Tensor h = x + o(att.transpose(1, 2).reshape({b, s, d}));
    return h + fc2(torch::gelu(fc1(ln2(h)), "tanh"));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear q, k, v, o;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(std::int64_t vocab, const Config& c)
      : embed(register_module("embed", torch::nn::Embedding(vocab, c.d_model))),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(
                                         torch::nn::LayerNormOptions({c.d_model}).eps(1e-5)))),
        head(register_module("head", torch::nn::Linear(c.d_model, vocab))) {
    for (std::int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), Block(c.d_model, c.heads)));
    }
    std::tie(cos, sin) = rotary_tables(c.context, c.d_model / c.heads);
    mask = torch::tril(torch::ones({c.context, c.context})) > 0;
  }

  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor x = embed(tokens);
    for (Block& b : blocks) x = b->forward(x, mask, cos, sin);
    return head(ln_f(x));
  }

  torch::nn::Embedding embed;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear head;
  torch::Tensor cos, sin, mask;
};
TORCH_MODULE(Gpt);

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run(const Config& c) {
  std::ifstream f(c.corpus, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + c.corpus + " (pass --corpus)");
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (static_cast<std::int64_t>(text.size()) < c.context + 2) {
    throw std::runtime_error(c.corpus + " is too short for the context");
  }
  // The vocabulary: the distinct bytes, sorted (as the example's).
  std::array<std::int64_t, 256> id{};
  id.fill(-1);
  for (char ch : text) id[static_cast<unsigned char>(ch)] = 0;
  std::int64_t vocab = 0;
  for (auto& x : id) {
    if (x == 0) x = vocab++;
  }
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (char ch : text) ids.push_back(id[static_cast<unsigned char>(ch)]);
  const auto n = static_cast<std::int64_t>(ids.size());
  const torch::Tensor data = torch::tensor(ids, torch::kLong);

  torch::manual_seed(c.seed);
  Gpt model(vocab, c);
  torch::optim::Adam opt(model->parameters(),
                         torch::optim::AdamOptions(c.lr).betas({0.9, 0.999}).eps(1e-8));
  const torch::Tensor offsets = torch::arange(c.context, torch::kLong).unsqueeze(0);
  auto step = [&] {
    const torch::Tensor starts = torch::randint(0, n - c.context, {c.batch, 1}, torch::kLong);
    const torch::Tensor idx = starts + offsets;
    const torch::Tensor x = data.index({idx});
    const torch::Tensor y = data.index({idx + 1});
    opt.zero_grad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(model->forward(x).view({-1, vocab}), y.view({-1}));
    loss.backward();
    opt.step();
    return loss.item<float>();
  };

  std::vector<float> losses;
  std::vector<double> step_ms;
  auto last = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < c.steps; ++s) {
    losses.push_back(step());
    const auto now = std::chrono::steady_clock::now();
    if (s >= 2) step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
  const std::size_t tail = std::min<std::size_t>(losses.size(), 20);
  double final_loss = 0;
  for (std::size_t i = losses.size() - tail; i < losses.size(); ++i) final_loss += losses[i];
  final_loss /= static_cast<double>(tail);
  std::int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  std::cout << "{\"model\": \"char_transformer\", \"device\": \"cpu\", \"vocab_size\": " << vocab
            << ", \"parameters\": " << params << ", \"steps\": " << c.steps
            << ", \"batch_size\": " << c.batch << ", \"context\": " << c.context
            << ", \"torch_threads\": " << at::get_num_threads()
            << ", \"initial_loss\": " << losses.front() << ", \"final_loss\": " << final_loss
            << ", \"median_step_ms\": " << median(step_ms) << "}" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "usage: " << argv[0]
                << " [--corpus FILE] [--steps N] [--batch-size B] [--context T] [--d-model D]"
                   " [--heads H] [--layers L] [--lr LR] [--seed S]\n";
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--corpus") {
      c.corpus = v;
    } else if (a == "--steps") {
      c.steps = std::atoll(v);
    } else if (a == "--batch-size") {
      c.batch = std::atoll(v);
    } else if (a == "--context") {
      c.context = std::atoll(v);
    } else if (a == "--d-model") {
      c.d_model = std::atoll(v);
    } else if (a == "--heads") {
      c.heads = std::atoll(v);
    } else if (a == "--layers") {
      c.layers = std::atoll(v);
    } else if (a == "--lr") {
      c.lr = std::atof(v);
    } else if (a == "--seed") {
      c.seed = std::strtoull(v, nullptr, 10);
    } else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  if (c.steps < 3 || c.d_model % c.heads != 0 || (c.d_model / c.heads) % 2 != 0) {
    std::cerr << "need --steps >= 3 and an even d_model / heads\n";
    return 2;
  }
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
