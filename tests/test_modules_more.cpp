// GRUCell/LSTMCell (one step against a scalar reference; an LSTM under scan in
// filter_jit against a loop of the eager cell), Conv1d/ConvTranspose2d/
// AdaptiveAvgPool2d, and the per-example and elementwise losses against
// Optax's formulas.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "check_close.hpp"
#include "finite_diff.hpp"

using namespace kiln;
using testing::check_close;

namespace {

double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Row r of (W x) for W (rows, n) row-major and x (n,).
double dot_row(const std::vector<float>& w, std::size_t r, std::size_t n,
               const std::vector<float>& x, std::size_t x0) {
  double s = 0;
  for (std::size_t j = 0; j < n; ++j) s += w[r * n + j] * x[x0 + j];
  return s;
}

}  // namespace

TEST_CASE("GRUCell has Equinox's layout and init, and one step matches the GRU equations") {
  nn::GRUCell cell(3, 4, random::key(0));
  CHECK(to_string(cell.weight_ih.shape()) == "(12, 3)");
  CHECK(to_string(cell.weight_hh.shape()) == "(12, 4)");
  CHECK(to_string(cell.bias.shape()) == "(12,)");
  CHECK(to_string(cell.bias_n.shape()) == "(4,)");
  CHECK(max(abs(cell.weight_hh)).item<float>() <= 0.5f);  // 1 / sqrt(hidden_size)
  CHECK(max(abs(cell.weight_hh)).item<float>() > 0.4f);
  CHECK(nn::GRUCell(3, 4, random::key(0)).weight_ih.to_vector<float>() ==
        cell.weight_ih.to_vector<float>());
  CHECK(nn::GRUCell(3, 4, random::key(0), false).bias_n.is_null());
  std::mt19937 gen(2);
  const Array x = testing::uniform_array(gen, {2, 3}, f32);
  const Array h = testing::uniform_array(gen, {2, 4}, f32);
  const Array got = cell(x, h);
  const auto wi = cell.weight_ih.to_vector<float>(), wh = cell.weight_hh.to_vector<float>();
  const auto b = cell.bias.to_vector<float>(), bn = cell.bias_n.to_vector<float>();
  const auto xv = x.to_vector<float>(), hv = h.to_vector<float>();
  std::vector<float> want;
  for (std::size_t n = 0; n < 2; ++n) {
    for (std::size_t k = 0; k < 4; ++k) {
      auto gi = [&](std::size_t g) { return dot_row(wi, g * 4 + k, 3, xv, n * 3) + b[g * 4 + k]; };
      auto gh = [&](std::size_t g) { return dot_row(wh, g * 4 + k, 4, hv, n * 4); };
      const double r = sigm(gi(0) + gh(0)), z = sigm(gi(1) + gh(1));
      const double cand = std::tanh(gi(2) + r * (gh(2) + bn[k]));
      want.push_back(static_cast<float>(cand + z * (hv[n * 4 + k] - cand)));
    }
  }
  check_close(got, array<float>(want, {2, 4}), 1e-5);
}

TEST_CASE("LSTMCell: one step matches the LSTM equations with gates (i, f, g, o)") {
  nn::LSTMCell cell(2, 3, random::key(1));
  CHECK(to_string(cell.weight_ih.shape()) == "(12, 2)");
  CHECK(to_string(cell.weight_hh.shape()) == "(12, 3)");
  CHECK(to_string(cell.bias.shape()) == "(12,)");
  std::mt19937 gen(3);
  const Array x = testing::uniform_array(gen, {2}, f32);  // unbatched works too
  const Array h = testing::uniform_array(gen, {3}, f32), c = testing::uniform_array(gen, {3}, f32);
  auto [h2, c2] = cell(x, {h, c});
  const auto wi = cell.weight_ih.to_vector<float>(), wh = cell.weight_hh.to_vector<float>();
  const auto b = cell.bias.to_vector<float>();
  const auto xv = x.to_vector<float>(), hv = h.to_vector<float>(), cv = c.to_vector<float>();
  std::vector<float> hw, cw;
  for (std::size_t k = 0; k < 3; ++k) {
    auto gate = [&](std::size_t g) {
      return dot_row(wi, g * 3 + k, 2, xv, 0) + dot_row(wh, g * 3 + k, 3, hv, 0) + b[g * 3 + k];
    };
    const double cn = sigm(gate(1)) * cv[k] + sigm(gate(0)) * std::tanh(gate(2));
    cw.push_back(static_cast<float>(cn));
    hw.push_back(static_cast<float>(sigm(gate(3)) * std::tanh(cn)));
  }
  check_close(h2, array<float>(hw, {3}), 1e-5);
  check_close(c2, array<float>(cw, {3}), 1e-5);
}

TEST_CASE("an LSTM over a sequence with scan inside filter_jit equals a loop of the eager cell, "
          "values and gradients") {
  const nn::LSTMCell cell(3, 5, random::key(2));
  std::mt19937 gen(4);
  const Array xs = testing::uniform_array(gen, {6, 2, 3}, f32);  // (T, B, input)
  const Array h0 = zeros({2, 5}), c0 = zeros({2, 5});
  const auto run_scan = [](const nn::LSTMCell& m, const Array& seq, const Array& h,
                           const Array& c) {
    auto [last, hs] = scan(
        [&m](const std::pair<Array, Array>& hc, const Array& x) {
          auto next = m(x, hc);
          return std::pair{next, next.first};
        },
        std::pair{h, c}, seq);
    return std::tuple{hs, last.first, last.second};
  };
  auto jitted = filter_jit(run_scan);
  auto [hs, h_last, c_last] = jitted(cell, xs, h0, c0);
  std::pair<Array, Array> hc{h0, c0};
  std::vector<Array> want;
  for (std::int64_t t = 0; t < 6; ++t) {
    hc = cell(reshape(slice_axis(xs, 0, t, t + 1), {2, 3}), hc);
    want.push_back(hc.first);
  }
  check_close(hs, stack(want), 1e-5);
  check_close(h_last, hc.first, 1e-5);
  check_close(c_last, hc.second, 1e-5);
  jitted(cell, xs * 0.5, h0, c0);
  CHECK(jitted.trace_count() == 1);

  // Gradients through the scan equal those through the unrolled loop.
  const auto g_scan = grad([&](const nn::LSTMCell& m) {
    return sum(std::get<0>(run_scan(m, xs, h0, c0)));
  })(cell);
  const auto g_loop = grad([&](const nn::LSTMCell& m) {
    std::pair<Array, Array> s{h0, c0};
    Array total = zeros({});
    for (std::int64_t t = 0; t < 6; ++t) {
      s = m(reshape(slice_axis(xs, 0, t, t + 1), {2, 3}), s);
      total = total + sum(s.first);
    }
    return total;
  })(cell);
  check_close(g_scan.weight_hh, g_loop.weight_hh, 1e-4);
  check_close(g_scan.bias, g_loop.bias, 1e-4);
  CHECK(max(abs(g_scan.weight_hh)).item<float>() > 1e-3f);
}
