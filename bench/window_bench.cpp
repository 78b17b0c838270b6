// unfold and fold (im2col / col2im) on the CNN's shapes, next to the physical
// limit, a memcpy of the columns' bytes between warm buffers, and next to a
// streaming kiln op of the columns' size (cols * 2: a fresh result buffer,
// as unfold's).
// Median of `rounds` timings of `reps` calls each.
//   build/bench/window_bench [rounds] [reps]     (KILN_NUM_THREADS, KILN_DEVICE)
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

using namespace kiln;

namespace {

template <class F>
double median_us(int rounds, int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double memcpy_us(std::size_t bytes, int rounds, int reps) {
  std::vector<char> a(bytes, 1), b(bytes);
  return median_us(rounds, reps, [&] { std::memcpy(b.data(), a.data(), bytes); });
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  struct Case {
    std::string label;
    Shape image;
    Window window;
  };
  const Case cases[] = {
      {"conv1 3x3 pad 1 (128,1,28,28)", {128, 1, 28, 28}, {.size = {3, 3}, .padding = {{1, 1}, {1, 1}}}},
      {"conv2 3x3 pad 1 (128,32,14,14)", {128, 32, 14, 14}, {.size = {3, 3}, .padding = {{1, 1}, {1, 1}}}},
      {"pool1 2x2 stride 2 (128,32,28,28)", {128, 32, 28, 28}, {.size = {2, 2}, .strides = {2, 2}}},
      {"pool2 2x2 stride 2 (128,64,14,14)", {128, 64, 14, 14}, {.size = {2, 2}, .strides = {2, 2}}},
  };
  std::cout << "device " << default_device().to_string() << ", " << num_threads()
            << " threads; median us of " << rounds << " x " << reps << " calls\n";
  std::cout << std::left << std::setw(38) << "case" << std::right << std::setw(12) << "unfold"
            << std::setw(12) << "fold" << std::setw(14) << "memcpy cols" << std::setw(12)
            << "cols * 2" << std::setw(12) << "unfold/mc" << std::setw(12) << "fold/mc"
            << std::setw(12) << "unfold/mul" << "\n";
  // The CPU runs an op when it is called; a device needs the result read back.
  const bool cpu = default_device() == Device::cpu();
  const auto done = [cpu](const Array& a) {
    if (!cpu) (void)a.to_vector<float>();
  };
  for (const Case& c : cases) {
    const Array x = random::uniform(random::key(1), c.image);
    const Array cols = unfold(x, c.window);
    (void)cols.to_vector<float>();
    const Shape spatial(c.image.end() - 2, c.image.end());
    const double u = median_us(rounds, reps, [&] { done(unfold(x, c.window)); });
    const double f = median_us(rounds, reps, [&] { done(fold(cols, spatial, c.window)); });
    const double m = memcpy_us(static_cast<std::size_t>(cols.size()) * 4, rounds, reps);
    const double k = median_us(rounds, reps, [&] { done(cols * 2.0); });
    std::cout << std::left << std::setw(38) << c.label << std::right << std::fixed
              << std::setprecision(0) << std::setw(12) << u << std::setw(12) << f
              << std::setw(14) << m << std::setw(12) << k << std::setprecision(2)
              << std::setw(12) << u / m << std::setw(12) << f / m << std::setw(12) << u / k
              << "\n";
  }
}
