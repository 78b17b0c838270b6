// The small CNN of bench/cnn_step.cpp (and its LibTorch and JAX peers), shared
// with bench/gpu_steps.cpp: 1x28x28 -> conv 32 -> pool -> conv 64 -> pool ->
// linear 10, ReLU after each convolution, kiln::nn layers on unfold.
#pragma once

#include <kiln/kiln.hpp>

namespace kiln_bench {

struct Cnn {
  kiln::nn::Conv2d conv1, conv2;
  kiln::nn::Linear head;
  KILN_MODULE(Cnn, conv1, conv2, head);

  Cnn() = default;
  // keys: (3, 2) PRNG keys, one per layer.
  explicit Cnn(const kiln::Array& keys)
      : conv1(1, 32, 3, key(keys, 0), {.padding = 1}),
        conv2(32, 64, 3, key(keys, 1), {.padding = 1}),
        head(64 * 7 * 7, 10, key(keys, 2)) {}

  kiln::Array operator()(const kiln::Array& x) const {
    const kiln::nn::MaxPool2d pool(2, {.stride = 2});
    kiln::Array h = pool(relu(conv1(x)));  // (N, 32, 14, 14)
    h = pool(relu(conv2(h)));              // (N, 64, 7, 7)
    return head(reshape(h, {h.shape()[0], -1}));
  }

  static kiln::Array key(const kiln::Array& keys, int i) {
    return kiln::reshape(kiln::slice_axis(keys, 0, i, i + 1), {2});
  }
};

}  // namespace kiln_bench
