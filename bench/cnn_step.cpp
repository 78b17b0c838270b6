// Time of one eager forward+grad step of a small Fashion-MNIST-sized CNN built
// from kiln::nn (conv/pool on the unfold primitive): batch 128 of 1x28x28,
// conv 32 -> pool -> conv 64 -> pool -> linear 10, softmax cross-entropy.
//   build/bench/cnn_step [iterations]      (KILN_DEVICE picks the device)
//
// With --jit or --json: a whole training step (value_and_grad + one optim::adam
// update, lr 1e-3, model and optimizer state in and out, donated), filter_jit'd
// with --jit (as examples/train_fashion_mnist's step), eager without it; case (h)
// of bench/peers.py. The batch is the one bench/torch_cnn_step.cpp and
// bench/peers/jax_cnn_step.py use: x[j] = (j % 251) / 251 over the flat
// (128, 1, 28, 28) index j, label i % 10 for image i (the initial weights come
// from each library's own PRNG). 3 warm-up steps, then [iterations] steps (default
// 20 here), each timed up to its loss read on the host; --json prints one line
// with the median step time in ms, the last step's loss and the CPU code that ran
// (kiln's DeviceInfo.driver, as bench_jit and matmul_peak report it).
//   build/bench/cnn_step [iterations] [--jit] [--json]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <kiln/kiln.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "cnn_model.hpp"

using namespace kiln;

namespace {

using kiln_bench::Cnn;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Array cnn_loss(const Cnn& m, const Array& x, const Array& y) {
  return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
}

// The training-step mode (--jit / --json): see the header.
int train_steps(int iters, bool jit, bool json) {
  constexpr int kWarmup = 3;
  const Array keys = random::split(random::key(0), 3);
  Cnn model(keys);
  std::vector<float> xs(128 * 28 * 28);
  for (std::size_t j = 0; j < xs.size(); ++j) xs[j] = static_cast<float>(j % 251) / 251.0f;
  std::vector<std::int32_t> ys(128);
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int32_t>(i % 10);
  const Array x = array<float>(xs, {128, 1, 28, 28});
  const Array y = array<std::int32_t>(ys, {128});

  const auto opt = optim::adam(1e-3);
  optim::State opt_state = opt.init(optim::gradient_template(model));
  auto train_step = [opt](const Cnn& m, const optim::State& s, const Array& x, const Array& y) {
    auto [loss, grads] = value_and_grad(cnn_loss)(m, x, y);
    auto [updates, next] = opt.update(grads, s, m);
    return std::tuple{optim::apply_updates(m, updates), next, loss};
  };
  auto jitted = filter_jit(train_step,
                           {.name = "cnn_train_step", .arg_names = {"model", "opt_state", "x", "y"}});
  std::vector<double> ms;
  float loss = 0;
  double first_ms = 0;
  for (int i = 0; i < kWarmup + iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Array l;
    if (jit) {
      std::tie(model, opt_state, l) = jitted(std::move(model), std::move(opt_state), x, y);
    } else {
      std::tie(model, opt_state, l) = train_step(model, opt_state, x, y);
    }
    loss = l.item<float>();  // waits for the step
    const double t = seconds_since(t0) * 1e3;
    if (i == 0) first_ms = t;
    if (i >= kWarmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  const double median = n == 0 ? 0.0 : n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  const std::string device = default_device().to_string();
  if (json) {
    std::cout << "{\"case\": \"cnn_step\", \"impl\": \"kiln\", \"mode\": \""
              << (jit ? "filter_jit" : "eager") << "\", \"device\": \"" << device
              << "\", \"threads\": " << num_threads() << ", \"batch\": 128, \"warmup\": "
              << kWarmup << ", \"steps\": " << iters << ", \"first_step_ms\": " << first_ms
              << ", \"median_step_ms\": " << median << ", \"final_loss\": " << loss
              << ", \"driver\": \"" << devices().front().driver << "\"}"
              << std::endl;
  } else {
    std::cout << (jit ? "filter_jit" : "eager") << " Adam training step: " << median
              << " ms (median of " << iters << " after " << kWarmup << " warm-up steps; first "
              << first_ms << " ms), loss " << loss << " (batch 128, " << device << ", "
              << num_threads() << " threads)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool jit = false, json = false;
  int positional = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--jit") {
      jit = true;
    } else if (a == "--json") {
      json = true;
    } else if (!a.empty() && a[0] != '-' && positional < 0) {
      positional = std::atoi(a.c_str());
    } else {
      std::cerr << "usage: cnn_step [iterations] [--jit] [--json]\n";
      return 2;
    }
  }
  if (jit || json) return train_steps(positional >= 0 ? positional : 20, jit, json);
  const int iters = positional >= 0 ? positional : 5;
  const Array keys = random::split(random::key(0), 4);
  auto k = [&](int i) { return reshape(slice_axis(keys, 0, i, i + 1), {2}); };
  Cnn model(keys);  // the first three keys
  const Array x = random::uniform(k(3), {128, 1, 28, 28});
  const Array y = random::randint(k(3), {128}, 0, 10);
  auto loss = [](const Cnn& m, const Array& x, const Array& y) {
    return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
  };
  auto step = [&] { return value_and_grad(loss)(model, x, y); };
  auto t0 = std::chrono::steady_clock::now();
  auto [l0, g0] = step();
  std::cout << "first step (warm-up): " << seconds_since(t0) * 1e3 << " ms, loss "
            << l0.item<float>() << "\n";
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    auto [l, g] = step();
    (void)g.head.weight.to_vector<float>();  // wait for the device
  }
  std::cout << "forward+grad step: " << seconds_since(t0) / iters * 1e3 << " ms (mean of "
            << iters << ", batch 128, " << default_device().to_string() << ")\n";
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) (void)model(x).to_vector<float>();
  std::cout << "forward only: " << seconds_since(t0) / iters * 1e3 << " ms\n";
}
