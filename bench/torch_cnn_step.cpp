// The LibTorch peer of bench/cnn_step --jit --json (case (h) of bench/peers.py):
// the same small Fashion-MNIST CNN and training step in LibTorch eager.
//   x (128, 1, 28, 28) -> Conv2d(1, 32, 3, padding 1) + bias -> ReLU
//     -> MaxPool2d(2, stride 2) -> Conv2d(32, 64, 3, padding 1) + bias -> ReLU
//     -> MaxPool2d(2, stride 2) -> flatten -> Linear(64 * 7 * 7, 10)
//   loss: softmax cross entropy with integer labels, mean over the batch
//   one torch::optim::Adam step, lr 1e-3, betas (0.9, 0.999), eps 1e-8
// The batch is cnn_step's: x[j] = (j % 251) / 251 over the flat index j, label
// i % 10 for image i. LibTorch's default initialisation (conv and linear weights
// and biases uniform in +-1/sqrt(fan_in), as kiln::nn's and Equinox's) from its
// own PRNG, so other initial weights than kiln's. Timing as cnn_step's: 3 warm-up
// steps, then --steps steps, each timed up to its loss read on the host
// (loss.item()); prints the median in ms and the last loss as one JSON line.
// --threads N sets LibTorch's intra-op pool (at::set_num_threads; peers.py passes
// kiln's pool size), else LibTorch's default.
//   build/bench/torch_cnn_step [--steps N] [--threads N] [--seed S]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct CnnImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear head{nullptr};
  CnnImpl()
      : conv1(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2(register_module(
            "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        head(register_module("head", torch::nn::Linear(64 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    namespace F = torch::nn::functional;
    const auto pool = F::MaxPool2dFuncOptions(2).stride(2);
    x = F::max_pool2d(torch::relu(conv1->forward(x)), pool);  // (N, 32, 14, 14)
    x = F::max_pool2d(torch::relu(conv2->forward(x)), pool);  // (N, 64, 7, 7)
    return head->forward(x.flatten(1));
  }
};
TORCH_MODULE(Cnn);

}  // namespace

int main(int argc, char** argv) {
  int steps = 20, threads = 0, seed = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") {
      steps = std::atoi(argv[i + 1]);
    } else if (flag == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (flag == "--seed") {
      seed = std::atoi(argv[i + 1]);
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (threads > 0) at::set_num_threads(threads);
  constexpr int kWarmup = 3;
  constexpr std::int64_t kBatch = 128;
  torch::manual_seed(seed);
  Cnn model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor x =
      (torch::arange(kBatch * 28 * 28, torch::kLong).remainder(251).to(torch::kFloat32) / 251.0)
          .reshape({kBatch, 1, 28, 28});
  const torch::Tensor y = torch::arange(kBatch, torch::kLong).remainder(10);

  std::vector<double> ms;
  double first_ms = 0, loss = 0;
  for (int i = 0; i < kWarmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    torch::Tensor l = torch::nn::functional::cross_entropy(model->forward(x), y);
    l.backward();
    opt.step();
    loss = l.item<double>();
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) first_ms = t;
    if (i >= kWarmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  const double median = n == 0 ? 0.0 : n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  std::cout << "{\"case\": \"cnn_step\", \"impl\": \"libtorch\", \"mode\": \"eager\", "
            << "\"device\": \"cpu\", \"threads\": " << at::get_num_threads()
            << ", \"batch\": " << kBatch << ", \"warmup\": " << kWarmup << ", \"steps\": " << steps
            << ", \"first_step_ms\": " << first_ms << ", \"median_step_ms\": " << median
            << ", \"final_loss\": " << loss << "}" << std::endl;
  return 0;
}
