// A GRU over a sequence, trained with one jitted step (forward, grad, SGD),
// written two ways: with kiln::scan (one loop in the program, its body traced
// once) and with a C++ loop that unrolls at trace time (one copy of the cell
// per step). Prints, per sequence length: the first call's trace+compile time,
// the compiled program's size (equations, counting those inside loop bodies),
// and the median step time; the ratios scan/unrolled are the point.
//   build/bench/rnn_scan [steps...]     (default 64 256; KILN_DEVICE picks the device)
// bench/peers/jax_rnn.py runs the same model with jax.lax.scan for the peer row.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

using namespace kiln;

namespace {

constexpr std::int64_t kBatch = 32, kIn = 16, kHidden = 64;

struct Gru {
  Array wx, wh, b;  // gates z, r, n side by side: (in, 3H), (H, 3H), (3H)
  Array wo;         // (H, 1) read-out
  KILN_MODULE(Gru, wx, wh, b, wo);
};

Array cell(const Gru& m, const Array& h, const Array& x) {
  const Array gx = matmul(x, m.wx) + m.b;
  const Array gh = matmul(h, m.wh);
  const Array z = sigmoid(slice_axis(gx, 1, 0, kHidden) + slice_axis(gh, 1, 0, kHidden));
  const Array r =
      sigmoid(slice_axis(gx, 1, kHidden, 2 * kHidden) + slice_axis(gh, 1, kHidden, 2 * kHidden));
  const Array n = tanh(slice_axis(gx, 1, 2 * kHidden, 3 * kHidden) +
                       r * slice_axis(gh, 1, 2 * kHidden, 3 * kHidden));
  return (1.0 - z) * n + z * h;
}

// xs: (T, B, in), ys: (T, B, 1): the read-out of every step against a target.
Array loss_scan(const Gru& m, const Array& xs, const Array& ys) {
  auto [h, err] = scan(
      [&](const Array& hh, const std::tuple<Array, Array>& xy) {
        const Array next = cell(m, hh, std::get<0>(xy));
        const Array d = matmul(next, m.wo) - std::get<1>(xy);
        return std::pair{next, sum(d * d)};
      },
      zeros({kBatch, kHidden}, f32, xs.device()), std::tuple{xs, ys});
  return sum(err) / static_cast<double>(xs.shape()[0] * kBatch);
}

Array loss_unrolled(const Gru& m, const Array& xs, const Array& ys) {
  Array h = zeros({kBatch, kHidden}, f32, xs.device());
  Array total = zeros({}, f32, xs.device());
  for (std::int64_t t = 0; t < xs.shape()[0]; ++t) {
    h = cell(m, h, reshape(slice_axis(xs, 0, t, t + 1), {kBatch, kIn}));
    const Array d = matmul(h, m.wo) - reshape(slice_axis(ys, 0, t, t + 1), {kBatch, 1});
    total = total + sum(d * d);
  }
  return total / static_cast<double>(xs.shape()[0] * kBatch);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Loss>
void run(const char* label, Loss loss, std::int64_t steps, const Gru& init, const Array& xs,
         const Array& ys, int reps) {
  auto step = filter_jit([loss](Gru m, const Array& x, const Array& y) {
    auto [l, g] = value_and_grad([&](const Gru& mm) { return loss(mm, x, y); })(m);
    m = tree::map([](const Array& p, const Array& d) { return p - 0.1 * d; }, m, g);
    return std::pair{m, l};
  });
  Gru m = init;
  auto t0 = std::chrono::steady_clock::now();
  auto [m1, l1] = step(m, xs, ys);
  synchronize(xs.device());
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> times;
  m = m1;
  float last = Array(l1).item<float>();
  for (int i = 0; i < reps; ++i) {
    t0 = std::chrono::steady_clock::now();
    auto [m2, l2] = step(std::move(m), xs, ys);
    last = Array(l2).item<float>();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    m = std::move(m2);
  }
  // The size of the compiled program: the top-level Executable's program.
  const std::string text = step.compiled_text();
  std::size_t eqs = 0;
  for (std::size_t pos = 0; (pos = text.find(" = ", pos)) != std::string::npos; ++pos) ++eqs;
  std::printf(
      "%-9s T=%-4lld first call (trace+compile+run) %9.1f ms   program %6zu equations   "
      "step %8.2f ms   loss %.5f\n",
      label, static_cast<long long>(steps), first_ms, eqs, median(times), last);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {64, 256};
  const Device d = default_device();
  std::printf("GRU (batch %lld, in %lld, hidden %lld), SGD step on %s\n",
              static_cast<long long>(kBatch), static_cast<long long>(kIn),
              static_cast<long long>(kHidden), d.to_string().c_str());
  const Array keys = random::split(random::key(0), 6);
  const Gru init{
      to_device(random::normal(random::subkey(keys, 0), {kIn, 3 * kHidden}) * 0.25, d),
      to_device(random::normal(random::subkey(keys, 1), {kHidden, 3 * kHidden}) * 0.125, d),
      to_device(zeros({3 * kHidden}), d),
      to_device(random::normal(random::subkey(keys, 2), {kHidden, 1}) * 0.125, d)};
  // while_loop whose trip count only the device knows: a counter and a
  // vector updated until the counter reaches n. On a device the condition is
  // read once per batch of up to KILN_WHILE_MAX_BATCH (default 32) iterations.
  {
    using C = std::tuple<Array, Array>;
    auto loop = filter_jit([](const Array& n, const Array& v) {
      return while_loop([&](const C& c) { return std::get<0>(c) < n; },
                        [](const C& c) {
                          return C{std::get<0>(c) + 1, tanh(std::get<1>(c) * 0.9 + 0.1)};
                        },
                        C{zeros({}, i32, v.device()), v});
    });
    const Array v = to_device(ones({4096}), d);
    for (int n : {10, 300}) {
      const Array limit = to_device(full({}, n, i32), d);
      std::get<1>(loop(limit, v)).to_vector<float>();
      std::vector<double> times;
      for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::get<1>(loop(limit, v)).to_vector<float>();
        times.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      const char* mb = std::getenv("KILN_WHILE_MAX_BATCH");
      std::printf("while_loop %4d iterations (max batch %s): %8.2f ms\n", n,
                  mb == nullptr ? "default" : mb, median(times));
    }
  }
  for (std::int64_t t : lengths) {
    const Array xs = to_device(random::normal(random::subkey(keys, 3), {t, kBatch, kIn}), d);
    const Array ys = to_device(random::normal(random::subkey(keys, 4), {t, kBatch, 1}), d);
    run("scan", loss_scan, t, init, xs, ys, 5);
    run("unrolled", loss_unrolled, t, init, xs, ys, 5);
  }
  return 0;
}
