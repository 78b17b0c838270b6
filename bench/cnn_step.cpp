// Time of one eager forward+grad step of a small Fashion-MNIST-sized CNN built
// from kiln::nn (conv/pool on the unfold primitive): batch 128 of 1x28x28,
// conv 32 -> pool -> conv 64 -> pool -> linear 10, softmax cross-entropy.
//   build/bench/cnn_step [iterations]      (KILN_DEVICE picks the device)
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <kiln/kiln.hpp>

using namespace kiln;

namespace {

struct Cnn {
  nn::Conv2d conv1, conv2;
  nn::Linear head;
  KILN_MODULE(Cnn, conv1, conv2, head);

  Array operator()(const Array& x) const {
    const nn::MaxPool2d pool(2, {.stride = 2});
    Array h = pool(relu(conv1(x)));  // (N, 32, 14, 14)
    h = pool(relu(conv2(h)));        // (N, 64, 7, 7)
    return head(reshape(h, {h.shape()[0], -1}));
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5;
  const Array keys = random::split(random::key(0), 4);
  auto k = [&](int i) { return reshape(slice_axis(keys, 0, i, i + 1), {2}); };
  Cnn model{nn::Conv2d(1, 32, 3, k(0), {.padding = 1}), nn::Conv2d(32, 64, 3, k(1), {.padding = 1}),
            nn::Linear(64 * 7 * 7, 10, k(2))};
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
