// Trains a small character-level GPT (model.hpp: pre-norm nn::TransformerBlocks
// with RoPE) on a text file with a filter_jit'd Adam step, then samples
// from it character by character with random::categorical. Both the training
// step and the sampler trace exactly once (debug::assert_max_traces(..., 1)):
// batches are drawn inside the step (random::randint + take), and the sampler
// always sees a fixed-length context window.
//
//   build/examples/char_transformer                      # default device
//   build/examples/char_transformer --device vulkan --steps 300
//   build/examples/char_transformer --corpus my.txt --sample-length 500
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <kiln/kiln.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "model.hpp"

#ifndef KILN_CHAR_CORPUS
#define KILN_CHAR_CORPUS "corpus.txt"
#endif

namespace {

using namespace kiln;
using chargpt::Gpt;

struct Config {
  std::string corpus = KILN_CHAR_CORPUS;
  std::string device;
  std::int64_t steps = 500;
  std::int64_t batch_size = 16;
  std::int64_t context = 32;
  std::int64_t d_model = 64;
  std::int64_t n_heads = 2;
  std::int64_t n_layers = 2;
  double learning_rate = 3e-3;
  std::uint32_t seed = 0;
  std::int64_t sample_length = 200;
  double temperature = 0.8;
  std::string prompt;  // "": a newline if the corpus has one, else its first character
  std::int64_t log_every = 50;
  std::string json;
};

// The text and its vocabulary: the distinct bytes of the file, sorted.
struct Corpus {
  std::string text;
  std::vector<unsigned char> vocab;       // id -> byte
  std::array<std::int32_t, 256> id{};     // byte -> id, -1 if absent
  std::vector<std::int32_t> ids;          // the text as ids
};

Corpus read_corpus(const std::string& path, std::int64_t context) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw ValueError("[corpus] " + path + ": no such file (pass a text file with --corpus)");
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw ValueError("[corpus] " + path + " is a directory, not a text file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ValueError("[corpus] cannot open " + path);
  Corpus c;
  c.text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (f.bad()) throw ValueError("[corpus] cannot read " + path);
  if (c.text.empty()) throw ValueError("[corpus] " + path + " is empty");
  if (static_cast<std::int64_t>(c.text.size()) < context + 2) {
    throw ValueError("[corpus] " + path + " has " + std::to_string(c.text.size()) +
                     " bytes: too short for a context of " + std::to_string(context) +
                     " (need at least " + std::to_string(context + 2) + ")");
  }
  std::array<bool, 256> seen{};
  for (char ch : c.text) seen[static_cast<unsigned char>(ch)] = true;
  c.id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) {
      c.id[b] = static_cast<std::int32_t>(c.vocab.size());
      c.vocab.push_back(static_cast<unsigned char>(b));
    }
  }
  c.ids.reserve(c.text.size());
  for (char ch : c.text) c.ids.push_back(c.id[static_cast<unsigned char>(ch)]);
  return c;
}

Array loss_fn(const Gpt& model, const Array& x, const Array& y) {
  return nn::softmax_cross_entropy_with_integer_labels(model(x), y);  // mean over B*T
}

// `batch` windows of `context` ids at random offsets of `data` and the same
// windows shifted by one (the next characters): (B, T) inputs and targets.
std::pair<Array, Array> sample_batch(const Array& key, const Array& data, std::int64_t batch,
                                     std::int64_t context) {
  const std::int64_t n = data.shape()[0];
  const Array starts = random::randint(key, {batch}, 0, n - context);  // last start n-T-1
  const Array idx = expand_dims(starts, 1) + expand_dims(arange(static_cast<double>(context)), 0);
  return {take(data, idx, 0), take(data, idx + 1, 0)};
}

std::string json_string(const std::string& s) {
  std::ostringstream o;
  o << '"';
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o << '\\' << ch;
    } else if (ch == '\n') {
      o << "\\n";
    } else if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o << buf;
    } else {
      o << ch;
    }
  }
  o << '"';
  return o.str();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run(Config cfg) {
  const Corpus corpus = read_corpus(cfg.corpus, cfg.context);
  if (cfg.prompt.empty()) cfg.prompt = corpus.id['\n'] >= 0 ? "\n" : corpus.text.substr(0, 1);
  const auto n = static_cast<std::int64_t>(corpus.ids.size());
  const auto vocab = static_cast<std::int64_t>(corpus.vocab.size());
  for (char ch : cfg.prompt) {
    if (corpus.id[static_cast<unsigned char>(ch)] < 0) {
      throw ValueError(std::string("[sample] --prompt has the character '") + ch +
                       "', which is not in the corpus " + cfg.corpus);
    }
  }
  std::ostringstream device_name;
  device_name << default_device();
  std::cout << "kiln: a character-level GPT on " << cfg.corpus << " (" << n << " characters, "
            << vocab << " distinct) on " << device_name.str() << "\n  " << cfg.n_layers
            << " layers, d_model " << cfg.d_model << ", " << cfg.n_heads << " heads, context "
            << cfg.context << ", batch " << cfg.batch_size << ", Adam " << cfg.learning_rate
            << ", " << cfg.steps << " steps, seed " << cfg.seed << "\n";

  const Array keys = random::split(random::key(cfg.seed), 3);
  const chargpt::ModelConfig mc{vocab, cfg.d_model, cfg.n_heads, cfg.n_layers};
  Gpt model = Gpt::init(mc, random::subkey(keys, 0));
  Array train_key = random::subkey(keys, 1);
  const Array sample_key = random::subkey(keys, 2);
  const Array data = array<std::int32_t>(corpus.ids, {n});

  const auto opt = optim::adam(cfg.learning_rate);
  optim::State opt_state = opt.init(optim::gradient_template(model));
  const std::int64_t batch = cfg.batch_size, context = cfg.context;
  // One step: draw a batch, the loss and its gradient, the Adam update, the next
  // key. Model, optimiser state and key are donated (std::move below).
  auto train_step = debug::assert_max_traces(
      filter_jit(
          [opt, batch, context](const Gpt& m, const optim::State& s, const Array& key,
                                const Array& data) {
            const Array k = random::split(key, 2);
            auto [x, y] = sample_batch(random::subkey(k, 0), data, batch, context);
            auto [loss, grads] = value_and_grad(loss_fn)(m, x, y);
            auto [updates, next] = opt.update(grads, s, m);
            return std::tuple{optim::apply_updates(m, updates), next, random::subkey(k, 1), loss};
          },
          {.name = "train_step", .arg_names = {"model", "opt_state", "key", "data"}}),
      1);

  std::vector<float> losses;
  losses.reserve(static_cast<std::size_t>(cfg.steps));
  std::vector<double> step_ms;  // wall time per loop iteration after the first
  Array pending;                // the previous step's loss, read after the next is queued
  auto last = std::chrono::steady_clock::now();
  auto report = [&](std::int64_t done) {
    const std::size_t k = std::min<std::size_t>(losses.size(), std::size_t(cfg.log_every));
    const double recent =
        std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(k), losses.end(), 0.0) /
        double(k);
    std::cout << "step " << std::setw(5) << done << "/" << cfg.steps << "  loss " << std::fixed
              << std::setprecision(4) << losses.back() << " (mean of last " << k << ": "
              << recent << ")";
    if (!step_ms.empty()) std::cout << std::setprecision(1) << "  " << median(step_ms) << " ms/step";
    std::cout << "\n" << std::defaultfloat << std::flush;
  };
  for (std::int64_t s = 0; s < cfg.steps; ++s) {
    Array loss;
    std::tie(model, opt_state, train_key, loss) =
        train_step(std::move(model), std::move(opt_state), std::move(train_key), data);
    if (!pending.is_null()) {
      losses.push_back(pending.item<float>());
      const auto now = std::chrono::steady_clock::now();
      if (s >= 2) step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
      last = now;
      if (s % cfg.log_every == 0 || s == 1) report(s);
    } else {
      last = std::chrono::steady_clock::now();
    }
    pending = loss;
  }
  losses.push_back(pending.item<float>());
  report(cfg.steps);

  const double initial_loss = losses.front();
  const std::size_t tail = std::min<std::size_t>(losses.size(), 20);
  const double final_loss =
      std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(tail), losses.end(), 0.0) /
      double(tail);
  std::cout << std::fixed << std::setprecision(4) << "loss: initial " << initial_loss
            << " (log vocab " << std::log(double(vocab)) << "), final " << final_loss
            << " (mean of the last " << tail << " steps)\n"
            << std::setprecision(2) << "median step time: " << median(step_ms) << " ms\n"
            << std::defaultfloat;

  // Sampling: the context window always holds `context` ids (the prompt, left-padded
  // with its first character, then rolled left by one per generated character),
  // so every call has the same shape and the sampler traces once.
  const float temperature = static_cast<float>(cfg.temperature);
  auto next_char = debug::assert_max_traces(
      filter_jit(
          [temperature](const Gpt& m, const Array& window, const Array& key) {
            const Array logits = m(window);  // (1, T, V)
            const std::int64_t t = logits.shape()[1], v = logits.shape()[2];
            const Array last_logits = reshape(slice_axis(logits, 1, t - 1, t), {v});
            return random::categorical(key, last_logits / temperature);
          },
          {.name = "sample", .arg_names = {"model", "window", "key"}}),
      1);
  std::vector<std::int32_t> window(static_cast<std::size_t>(context),
                                   corpus.id[static_cast<unsigned char>(cfg.prompt.front())]);
  {
    const std::string p = cfg.prompt.size() > std::size_t(context)
                              ? cfg.prompt.substr(cfg.prompt.size() - std::size_t(context))
                              : cfg.prompt;
    for (std::size_t i = 0; i < p.size(); ++i) {
      window[window.size() - p.size() + i] = corpus.id[static_cast<unsigned char>(p[i])];
    }
  }
  const Array sample_keys = random::split(sample_key, std::max<std::int64_t>(cfg.sample_length, 1));
  std::string sample;
  for (std::int64_t i = 0; i < cfg.sample_length; ++i) {
    const Array id = next_char(model, array<std::int32_t>(window, {1, context}),
                               random::subkey(sample_keys, i));
    const std::int32_t c = id.item<std::int32_t>();
    sample.push_back(static_cast<char>(corpus.vocab.at(static_cast<std::size_t>(c))));
    std::rotate(window.begin(), window.begin() + 1, window.end());
    window.back() = c;
  }
  const int train_traces = train_step.trace_count();
  const int sample_traces = next_char.trace_count();
  std::cout << "traces: train_step " << train_traces << ", sample " << sample_traces << "\n"
            << "sample (" << sample.size() << " characters, temperature " << cfg.temperature
            << ", prompt " << json_string(cfg.prompt) << "):\n"
            << cfg.prompt << sample << "\n";

  if (!cfg.json.empty()) {
    std::ofstream f(cfg.json);
    f << std::setprecision(9) << "{\"device\":" << json_string(device_name.str())
      << ",\"corpus\":" << json_string(cfg.corpus) << ",\"vocab_size\":" << vocab
      << ",\"steps\":" << cfg.steps << ",\"initial_loss\":" << initial_loss
      << ",\"final_loss\":" << final_loss << ",\"median_step_ms\":" << median(step_ms)
      << ",\"train_traces\":" << train_traces << ",\"sample_traces\":" << sample_traces
      << ",\"losses\":[";
    for (std::size_t i = 0; i < losses.size(); ++i) f << (i ? "," : "") << losses[i];
    f << "],\"sample\":" << json_string(sample) << "}\n";
    if (!f.flush()) throw ValueError("[json] cannot write " + cfg.json);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train a character-level GPT with kiln and sample from it."};
  app.add_option("--corpus", cfg.corpus, "Text file to train on")->capture_default_str();
  app.add_option("--device", cfg.device, "cpu, vulkan or vulkan:N (default: KILN_DEVICE, "
                                         "else a GPU if there is one, else cpu)");
  app.add_option("--steps", cfg.steps, "Training steps")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "Windows per step")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--context", cfg.context, "Characters per window")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--d-model", cfg.d_model, "Model width")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heads", cfg.n_heads, "Attention heads")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--layers", cfg.n_layers, "Transformer blocks")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", cfg.learning_rate, "Adam learning rate")->capture_default_str();
  app.add_option("--seed", cfg.seed, "PRNG seed (initialisation, batches, sampling)")
      ->capture_default_str();
  app.add_option("--sample-length", cfg.sample_length, "Characters to generate")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--temperature", cfg.temperature, "Sampling temperature")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--prompt", cfg.prompt,
                 "Text the sample continues, corpus characters only (default: a newline)");
  app.add_option("--log-every", cfg.log_every, "Print the loss every N steps")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--json", cfg.json, "Write the losses, trace counts and sample as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!cfg.device.empty()) set_default_device(parse_device(cfg.device));
    return run(cfg);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
