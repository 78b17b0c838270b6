// The two classifiers the example trains. Both take a normalised (B, 784) batch
// and return (B, 10) logits.
#pragma once

#include <kiln/kiln.hpp>

namespace fmnist {

// 784-256-256-10 with ReLU (eqx.nn.MLP(784, 10, 256, depth=2)).
struct Mlp {
  kiln::nn::MLP mlp;
  KILN_MODULE(Mlp, mlp);

  static constexpr const char* kName = "mlp";
  static Mlp init(const kiln::Array& key) { return {kiln::nn::MLP(784, 10, 256, 2, key)}; }
  kiln::Array operator()(const kiln::Array& x) const { return mlp(x); }
};

// conv 3x3 (32) -> ReLU -> max-pool 2 -> conv 3x3 (64) -> ReLU -> max-pool 2 ->
// linear 128 -> ReLU -> linear 10.
struct Cnn {
  kiln::nn::Conv2d conv1, conv2;
  kiln::nn::Linear fc1, fc2;
  KILN_MODULE(Cnn, conv1, conv2, fc1, fc2);

  static constexpr const char* kName = "cnn";
  static Cnn init(const kiln::Array& key) {
    using namespace kiln;
    const Array k = random::split(key, 4);
    auto part = [&](int i) { return reshape(slice_axis(k, 0, i, i + 1), {2}); };
    return {nn::Conv2d(1, 32, 3, part(0), {.padding = 1}),
            nn::Conv2d(32, 64, 3, part(1), {.padding = 1}), nn::Linear(64 * 7 * 7, 128, part(2)),
            nn::Linear(128, 10, part(3))};
  }
  kiln::Array operator()(const kiln::Array& x) const {
    using namespace kiln;
    const nn::MaxPool2d pool(2, {.stride = 2});
    Array h = reshape(x, {x.shape()[0], 1, 28, 28});
    h = pool(relu(conv1(h)));  // (B, 32, 14, 14)
    h = pool(relu(conv2(h)));  // (B, 64, 7, 7)
    return fc2(relu(fc1(reshape(h, {h.shape()[0], -1}))));
  }
};

}  // namespace fmnist
