// The LibTorch peer of examples/train_fashion_mnist --model mlp (case (c) of
// bench/peers.py): the same MLP (784-256-256-10 ReLU), inputs x/255 normalised as
// (x - 0.2860) / 0.3530, softmax cross entropy, Adam lr 1e-3 with a cosine decay
// over all steps (Optax's cosine_decay_schedule: the rate of step t, counted from
// 0, is 1e-3 * (1 + cos(pi * t / steps)) / 2), shuffled minibatches with the last
// partial batch dropped. LibTorch eager: nothing to compile; an epoch's
// train_seconds runs from its shuffle to its last optimizer step and includes the
// batch gathers. Test accuracy after each epoch (not timed). Reads the IDX gzip
// files of Debian's dataset-fashion-mnist; prints the example's JSON shape.
//   build/bench/torch_fmnist_epoch [--epochs N] [--batch-size B] [--seed S] [--data DIR]
#include <torch/torch.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<std::uint8_t> read_gz(const std::string& path, std::size_t header) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<std::uint8_t> data;
  std::uint8_t buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + got);
  gzclose(f);
  if (got < 0 || data.size() < header) throw std::runtime_error("cannot read " + path);
  return {data.begin() + static_cast<std::ptrdiff_t>(header), data.end()};
}

torch::Tensor images(const std::string& path) {
  std::vector<std::uint8_t> px = read_gz(path, 16);
  const auto n = static_cast<std::int64_t>(px.size() / 784);
  torch::Tensor x = torch::from_blob(px.data(), {n, 784}, torch::kUInt8).to(torch::kFloat32);
  return (x / 255.0 - 0.2860) / 0.3530;
}

torch::Tensor labels(const std::string& path) {
  std::vector<std::uint8_t> y = read_gz(path, 8);
  return torch::from_blob(y.data(), {static_cast<std::int64_t>(y.size())}, torch::kUInt8)
      .to(torch::kLong);
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 1, seed = 0;
  std::int64_t bs = 128;
  std::string data = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--epochs") {
      epochs = std::atoi(argv[i + 1]);
    } else if (flag == "--batch-size") {
      bs = std::atoll(argv[i + 1]);
    } else if (flag == "--seed") {
      seed = std::atoi(argv[i + 1]);
    } else if (flag == "--data") {
      data = argv[i + 1];
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const torch::Tensor x_train = images(data + "/train-images-idx3-ubyte.gz");
  const torch::Tensor y_train = labels(data + "/train-labels-idx1-ubyte.gz");
  const torch::Tensor x_test = images(data + "/t10k-images-idx3-ubyte.gz");
  const torch::Tensor y_test = labels(data + "/t10k-labels-idx1-ubyte.gz");
  const std::int64_t steps_per_epoch = x_train.size(0) / bs;
  const std::int64_t total_steps = steps_per_epoch * epochs;

  torch::manual_seed(seed);
  torch::nn::Sequential model(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                              torch::nn::Linear(256, 256), torch::nn::ReLU(),
                              torch::nn::Linear(256, 10));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto& options = static_cast<torch::optim::AdamOptions&>(opt.param_groups()[0].options());

  std::cout << "{\"model\": \"mlp\", \"device\": \"cpu\", \"batch_size\": " << bs
            << ", \"threads\": " << at::get_num_threads() << ", \"epochs\": [";
  std::int64_t t = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const torch::Tensor order = torch::randperm(x_train.size(0), torch::kLong);
    torch::Tensor loss_sum = torch::zeros({});
    for (std::int64_t s = 0; s < steps_per_epoch; ++s, ++t) {
      options.lr(1e-3 * 0.5 *
                 (1.0 + std::cos(std::numbers::pi * static_cast<double>(t) /
                                 static_cast<double>(total_steps))));
      const torch::Tensor idx = order.slice(0, s * bs, (s + 1) * bs);
      opt.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(x_train.index_select(0, idx)), y_train.index_select(0, idx));
      loss.backward();
      opt.step();
      loss_sum += loss.detach();
    }
    const double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    torch::NoGradGuard no_grad;
    const double accuracy =
        model->forward(x_test).argmax(1).eq(y_test).to(torch::kFloat64).mean().item<double>();
    std::cout << (epoch > 1 ? ", " : "") << "{\"epoch\": " << epoch
              << ", \"train_seconds\": " << train_seconds << ", \"steps\": " << steps_per_epoch
              << ", \"train_loss\": "
              << loss_sum.item<double>() / static_cast<double>(steps_per_epoch)
              << ", \"test_accuracy\": " << accuracy << "}";
  }
  std::cout << "]}" << std::endl;
  return 0;
}
