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
#include "error_text.hpp"
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

TEST_CASE(
    "an LSTM over a sequence with scan inside filter_jit equals a loop of the eager cell, "
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
  const auto g_scan =
      grad([&](const nn::LSTMCell& m) { return sum(std::get<0>(run_scan(m, xs, h0, c0))); })(cell);
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

namespace {

// Direct loops: y[n, o, l] = b[o] + sum w[o, c, k] * x[n, g * cg + c, l * s + k * d - p].
std::vector<float> conv1d_reference(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>& b, int n, int c, int len, int o,
                                    int k, int s, int p, int d, int groups, int lo) {
  const int cg = c / groups, og = o / groups;
  std::vector<float> y;
  for (int i = 0; i < n; ++i) {
    for (int oc = 0; oc < o; ++oc) {
      const int g = oc / og;
      for (int l = 0; l < lo; ++l) {
        double acc = b[oc];
        for (int ci = 0; ci < cg; ++ci) {
          for (int t = 0; t < k; ++t) {
            const int pos = l * s + t * d - p;
            if (pos < 0 || pos >= len) continue;
            acc += w[(oc * cg + ci) * k + t] * x[(i * c + g * cg + ci) * len + pos];
          }
        }
        y.push_back(static_cast<float>(acc));
      }
    }
  }
  return y;
}

}  // namespace

TEST_CASE("Conv1d with stride, padding, dilation and groups matches direct loops") {
  nn::Conv1d conv(4, 6, 3, random::key(5), {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
  CHECK(to_string(conv.weight.shape()) == "(6, 2, 3)");
  CHECK(to_string(conv.bias.shape()) == "(6, 1)");
  CHECK(max(abs(conv.weight)).item<float>() <= 1.0f / std::sqrt(6.0f));
  std::mt19937 gen(6);
  const Array x = testing::uniform_array(gen, {2, 4, 9}, f32);
  const Array y = conv(x);
  // Lo = (9 + 2 - 2 * 2 - 1) / 2 + 1 = 4
  REQUIRE(to_string(y.shape()) == "(2, 6, 4)");
  const std::vector<float> want =
      conv1d_reference(x.to_vector<float>(), conv.weight.to_vector<float>(),
                       conv.bias.to_vector<float>(), 2, 4, 9, 6, 3, 2, 1, 2, 2, 4);
  check_close(y, array<float>(want, {2, 6, 4}), 1e-5);
  check_close(conv(reshape(slice_axis(x, 0, 1, 2), {4, 9})),
              reshape(slice_axis(y, 0, 1, 2), {6, 4}), 1e-6);
  CHECK_THROWS_WITH_AS(conv(ones({2, 3, 9})),
                       doctest::Contains("[nn.Conv1d] expected input (N, 4, L) or (4, L), got "
                                         "(2, 3, 9)"),
                       ShapeError);
}

TEST_CASE("Conv3d with stride, asymmetric padding, dilation and groups matches direct loops") {
  const nn::Conv3d conv(4, 2, {2, 3, 2}, random::key(7),
                        {.stride = {2, 1, 2},
                         .padding = {{1, 0}, {0, 1}, {1, 1}},
                         .dilation = {1, 2, 1},
                         .groups = 2});
  CHECK(to_string(conv.weight.shape()) == "(2, 2, 2, 3, 2)");
  CHECK(to_string(conv.bias.shape()) == "(2, 1, 1, 1)");
  std::mt19937 gen(12);
  const Array x = testing::uniform_array(gen, {2, 4, 5, 6, 5}, f32);
  const Array y = conv(x);
  // D: (5 + 1 - 2) / 2 + 1 = 3; H: (6 + 1 - 5) / 1 + 1 = 3; W: (5 + 2 - 2) / 2 + 1 = 3.
  REQUIRE(to_string(y.shape()) == "(2, 2, 3, 3, 3)");
  const auto xv = x.to_vector<float>(), wv = conv.weight.to_vector<float>();
  const auto bv = conv.bias.to_vector<float>();
  const int s[3] = {2, 1, 2}, lo[3] = {1, 0, 1}, dil[3] = {1, 2, 1}, k[3] = {2, 3, 2};
  const int in[3] = {5, 6, 5};
  std::vector<float> want;
  for (int n = 0; n < 2; ++n) {
    for (int o = 0; o < 2; ++o) {
      for (int od = 0; od < 3; ++od) {
        for (int oh = 0; oh < 3; ++oh) {
          for (int ow = 0; ow < 3; ++ow) {
            double acc = bv[o];
            for (int ci = 0; ci < 2; ++ci) {
              for (int a = 0; a < k[0]; ++a) {
                for (int b = 0; b < k[1]; ++b) {
                  for (int e = 0; e < k[2]; ++e) {
                    const int p0 = od * s[0] + a * dil[0] - lo[0];
                    const int p1 = oh * s[1] + b * dil[1] - lo[1];
                    const int p2 = ow * s[2] + e * dil[2] - lo[2];
                    if (p0 < 0 || p0 >= in[0] || p1 < 0 || p1 >= in[1] || p2 < 0 || p2 >= in[2])
                      continue;
                    const int ch = o * 2 + ci;  // group o (one output per group)
                    acc += wv[(((o * 2 + ci) * 2 + a) * 3 + b) * 2 + e] *
                           xv[(((n * 4 + ch) * 5 + p0) * 6 + p1) * 5 + p2];
                  }
                }
              }
            }
            want.push_back(static_cast<float>(acc));
          }
        }
      }
    }
  }
  check_close(y, array<float>(want, {2, 2, 3, 3, 3}), 1e-5);
  CHECK_THROWS_WITH_AS(conv(ones({4, 5, 6})),
                       doctest::Contains("[nn.Conv3d] expected input (N, 4, D, H, W) or (4, D, "
                                         "H, W), got (4, 5, 6)"),
                       ShapeError);
}

TEST_CASE("conv3d gradients equal finite differences (f64)") {
  std::mt19937 gen(13);
  const nn::Conv3dFunctionOptions o{
      .stride = {2, 1, 1}, .padding = {1, 0, 1}, .dilation = {1, 1, 2}};
  const Array x = testing::uniform_array(gen, {1, 2, 4, 3, 4});
  const Array w = testing::uniform_array(gen, {2, 2, 2, 2, 2});
  const Array r = testing::uniform_array(gen, nn::conv3d(x, w, o).shape());
  testing::check_finite_differences(
      [&](const std::vector<Array>& p) { return sum(nn::conv3d(p[0], p[1], o) * r); }, {x, w});
}

TEST_CASE("ConvTranspose2d with stride 2 places kernel-scaled copies of each pixel") {
  nn::ConvTranspose2d up(1, 1, 2, random::key(0), {.stride = 2, .use_bias = false});
  up.weight = array<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  const Array x = array<float>({1, 10, 100, 1000}, {1, 1, 2, 2});
  // out[2i + a, 2j + b] = x[i, j] * K[a, b]: a Kronecker product.
  CHECK(up(x).to_vector<float>() ==
        std::vector<float>{1, 2, 10, 20, 3, 4, 30, 40, 100, 200, 1000, 2000, 300, 400, 3000, 4000});
  // Padding larger than dilation * (K - 1) crops: a 1x1 kernel with padding 1
  // drops the border.
  nn::ConvTranspose2d crop(1, 1, 1, random::key(0), {.padding = 1, .use_bias = false});
  crop.weight = full({1, 1, 1, 1}, 2.0);
  const Array img = reshape(astype(arange(16), f32), {1, 4, 4});
  CHECK(crop(img).to_vector<float>() == std::vector<float>{10, 12, 18, 20});
  // The usual decoder step: stride 2, padding 1, output_padding 1 doubles H, W.
  nn::ConvTranspose2d dec(8, 4, 3, random::key(1),
                          {.stride = 2, .padding = 1, .output_padding = 1});
  CHECK(to_string(dec.weight.shape()) == "(4, 8, 3, 3)");
  CHECK(to_string(dec.bias.shape()) == "(4, 1, 1)");
  CHECK(to_string(dec(ones({2, 8, 5, 6})).shape()) == "(2, 4, 10, 12)");
  CHECK_THROWS_WITH_AS(
      nn::ConvTranspose2d(8, 4, 3, random::key(1), {.stride = 2, .output_padding = 2}),
      doctest::Contains("[nn.ConvTranspose2d] output_padding (2, 2) must be >= 0 and smaller "
                        "than stride or dilation"),
      ValueError);
}

TEST_CASE("conv_transpose2d is the gradient of conv2d with respect to its input") {
  struct Case {
    nn::Int2 kernel, stride, dilation;
    nn::Padding2 padding;
    std::int64_t hz, wz;  // the conv2d input (the transpose's output) extent
  };
  const std::vector<Case> cases{
      {3, 2, 1, 1, 6, 6},
      {{3, 2}, {2, 3}, {1, 2}, {{1, 0}, {2, 1}}, 7, 8},
  };
  std::mt19937 gen(9);
  for (const Case& c : cases) {
    const nn::ConvOptions co{.stride = c.stride, .padding = c.padding, .dilation = c.dilation};
    const Array wt = testing::uniform_array(gen, {3, 2, c.kernel.h, c.kernel.w}, f32);
    const Array wc = transpose(wt, {1, 0, 2, 3});  // conv2d: 3 channels in, 2 out
    const Array z = testing::uniform_array(gen, {2, 3, c.hz, c.wz}, f32);
    const Array x = testing::uniform_array(gen, nn::conv2d(z, wc, co).shape(), f32);
    const Array want = grad([&](const Array& zz) { return sum(nn::conv2d(zz, wc, co) * x); })(z);
    // The output padding that restores the extent conv2d rounded away.
    auto extra = [](std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t s,
                    std::int64_t d, std::int64_t lo,
                    std::int64_t hi) { return in - ((out - 1) * s - lo - hi + d * (k - 1) + 1); };
    const nn::Int2 op(extra(c.hz, x.shape()[2], c.kernel.h, c.stride.h, c.dilation.h,
                            c.padding.h[0], c.padding.h[1]),
                      extra(c.wz, x.shape()[3], c.kernel.w, c.stride.w, c.dilation.w,
                            c.padding.w[0], c.padding.w[1]));
    INFO("output_padding " << op.h << ", " << op.w);
    check_close(nn::conv_transpose2d(x, wt,
                                     {.stride = c.stride,
                                      .padding = c.padding,
                                      .output_padding = op,
                                      .dilation = c.dilation}),
                want, 1e-4);
  }
  // Groups: each group transposes its own channels.
  const Array w = testing::uniform_array(gen, {4, 1, 3, 3}, f32);
  const Array x = testing::uniform_array(gen, {1, 2, 4, 4}, f32);
  const nn::ConvTransposeOptions o{.stride = 2, .padding = 1, .groups = 2};
  const Array grouped = nn::conv_transpose2d(x, w, o);
  const nn::ConvTransposeOptions o1{.stride = 2, .padding = 1};
  const Array parts =
      concatenate({nn::conv_transpose2d(slice_axis(x, 1, 0, 1), slice_axis(w, 0, 0, 2), o1),
                   nn::conv_transpose2d(slice_axis(x, 1, 1, 2), slice_axis(w, 0, 2, 4), o1)},
                  1);
  check_close(grouped, parts, 1e-5);
}

TEST_CASE("conv_transpose2d with output_padding >= stride (dilation 2, stride 1) adds a zero row of x") {
  // torch and lax allow output_padding below stride or dilation. With stride 1
  // and output_padding 1, the output z is one row and column larger than
  // any conv2d input that gives x's extent: the conv of z has one more
  // position per axis, which x (padded with zeros there) does not reach.
  std::mt19937 gen(13);
  const Array wt = testing::uniform_array(gen, {3, 2, 3, 3}, f32);
  const Array wc = transpose(wt, {1, 0, 2, 3});
  const nn::ConvOptions co{.padding = 1, .dilation = 2};
  const Array x = testing::uniform_array(gen, {2, 2, 4, 5}, f32);
  const Array got = nn::conv_transpose2d(
      x, wt, {.padding = 1, .output_padding = 1, .dilation = 2});
  REQUIRE(got.shape() == Shape{2, 3, 7, 8});
  const Array z = zeros({2, 3, 7, 8});
  REQUIRE(nn::conv2d(z, wc, co).shape() == Shape{2, 2, 5, 6});
  const Array xp = nn::pad(x, {{0, 0}, {0, 0}, {0, 1}, {0, 1}});
  const Array want = grad([&](const Array& zz) { return sum(nn::conv2d(zz, wc, co) * xp); })(z);
  check_close(got, want, 1e-4);
}

TEST_CASE("conv_transpose2d: padding that leaves no output is an error naming both shapes") {
  // Ho = (2 - 1) * 1 + (3 - 1) + 1 - 2 - 2 = 0.
  CHECK(testing::error_text([] {
          nn::conv_transpose2d(ones({1, 2, 2, 2}), ones({3, 2, 3, 3}), {.padding = 2});
        }) ==
        "[conv_transpose2d] padding (2, 2), (2, 2) leaves no output for input (1, 2, 2, 2) "
        "and kernel (3, 2, 3, 3)");
}

TEST_CASE("conv_transpose2d gradients equal finite differences (f64)") {
  std::mt19937 gen(10);
  const nn::ConvTransposeOptions o{
      .stride = {2, 1}, .padding = {{1, 0}, {0, 2}}, .output_padding = {1, 0}};
  const Array x = testing::uniform_array(gen, {1, 2, 3, 3});
  const Array w = testing::uniform_array(gen, {2, 2, 2, 3});
  const Array r = testing::uniform_array(gen, nn::conv_transpose2d(x, w, o).shape());
  testing::check_finite_differences(
      [&](const std::vector<Array>& p) { return sum(nn::conv_transpose2d(p[0], p[1], o) * r); },
      {x, w});
}

TEST_CASE("AdaptiveAvgPool2d averages Equinox's bins: the first n % t bins one element larger") {
  std::mt19937 gen(11);
  const Array x = testing::uniform_array(gen, {2, 3, 5, 7}, f32);
  const Array y = nn::AdaptiveAvgPool2d({2, 3})(x);
  REQUIRE(to_string(y.shape()) == "(2, 3, 2, 3)");
  // Rows 5 -> 2 bins: [0, 3), [3, 5). Columns 7 -> 3 bins: [0, 3), [3, 5), [5, 7).
  const std::vector<std::pair<int, int>> rows{{0, 3}, {3, 5}}, cols{{0, 3}, {3, 5}, {5, 7}};
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<float> want;
  for (int nc = 0; nc < 6; ++nc) {
    for (auto [r0, r1] : rows) {
      for (auto [c0, c1] : cols) {
        double s = 0;
        for (int r = r0; r < r1; ++r)
          for (int c = c0; c < c1; ++c) s += xv[(nc * 5 + r) * 7 + c];
        want.push_back(static_cast<float>(s / ((r1 - r0) * (c1 - c0))));
      }
    }
  }
  check_close(y, array<float>(want, {2, 3, 2, 3}), 1e-5);
  check_close(nn::AdaptiveAvgPool2d(1)(x), mean(x, {2, 3}, true), 1e-5);
  check_close(nn::AdaptiveAvgPool2d({5, 7})(x), x, 1e-6);
  check_close(nn::AdaptiveAvgPool2d({2, 3})(reshape(slice_axis(x, 0, 0, 1), {3, 5, 7})),
              reshape(slice_axis(y, 0, 0, 1), {3, 2, 3}), 1e-6);
  CHECK_THROWS_WITH_AS(nn::AdaptiveAvgPool2d({6, 2})(x),
                       doctest::Contains("[adaptive_avg_pool2d] target (6, 2) must be >= 1 and "
                                         "at most the input's (H, W) = (5, 7)"),
                       ShapeError);
}

TEST_CASE("per-example cross entropies keep the batch axes; the mean forms average them") {
  const Array logits = array<float>({1, 2, 3, 0, 0, 0, -1, 5, 2, 4, 4, -4}, {2, 2, 3});
  const Array labels = array<std::int32_t>({2, 0, 1, 1}, {2, 2});
  const std::vector<float> lv = logits.to_vector<float>();
  const std::vector<int> lab{2, 0, 1, 1};
  std::vector<float> want;
  for (int r = 0; r < 4; ++r) {
    double lse = 0;
    for (int k = 0; k < 3; ++k) lse += std::exp(lv[r * 3 + k]);
    want.push_back(static_cast<float>(std::log(lse) - lv[r * 3 + lab[r]]));
  }
  const Array per = nn::softmax_cross_entropy_with_integer_labels_per_example(logits, labels);
  check_close(per, array<float>(want, {2, 2}), 1e-6);
  const float avg = (want[0] + want[1] + want[2] + want[3]) / 4;
  CHECK(nn::softmax_cross_entropy_with_integer_labels(logits, labels).item<float>() ==
        doctest::Approx(avg).epsilon(1e-6));
  const Array onehot = one_hot(labels, 3);
  check_close(nn::softmax_cross_entropy_per_example(logits, onehot), per, 1e-6);
  CHECK(nn::softmax_cross_entropy(logits, onehot).item<float>() ==
        doctest::Approx(avg).epsilon(1e-6));
}

TEST_CASE(
    "sigmoid_binary_cross_entropy matches Optax's formula and stays finite for large "
    "logits") {
  const std::vector<float> z{-3.0f, -0.5f, 0.0f, 0.5f, 2.0f, 40.0f, -40.0f, 100.0f};
  const std::vector<float> y{0.0f, 1.0f, 0.5f, 0.0f, 1.0f, 0.0f, 1.0f, 1.0f};
  const Array logits = array<float>(z, {2, 4}), labels = array<float>(y, {2, 4});
  std::vector<float> want, slope;
  for (std::size_t i = 0; i < z.size(); ++i) {
    // -y log sigmoid(z) - (1 - y) log sigmoid(-z), with log sigmoid(z) = -log1p(exp(-z)).
    const double ls = -std::log1p(std::exp(-static_cast<double>(z[i])));
    const double lns = -std::log1p(std::exp(static_cast<double>(z[i])));
    want.push_back(static_cast<float>(-y[i] * ls - (1 - y[i]) * lns));
    slope.push_back(static_cast<float>(sigm(z[i]) - y[i]));
  }
  const Array per = nn::sigmoid_binary_cross_entropy_elementwise(logits, labels);
  check_close(per, array<float>(want, {2, 4}), 1e-6);
  CHECK(want[5] == doctest::Approx(40.0));  // confidently wrong: 40, not inf
  auto [v, g] = value_and_grad(
      [&](const Array& l) { return nn::sigmoid_binary_cross_entropy(l, labels); })(logits);
  double total = 0;
  for (float w : want) total += w;
  CHECK(v.item<float>() == doctest::Approx(total / 8).epsilon(1e-6));
  std::vector<float> mean_slope;
  for (float s : slope) mean_slope.push_back(s / 8);
  check_close(g, array<float>(mean_slope, {2, 4}), 1e-5);
}

TEST_CASE("huber_loss is quadratic within delta and linear beyond, as optax.huber_loss") {
  const Array pred = array<float>({0.0f, 0.5f, -1.0f, 3.0f, -2.5f, 1.0f}, {3, 2});
  const Array tgt = array<float>({0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.5f}, {3, 2});
  // delta 1.5: e = 0, .5, -1, 3, -2.5, -1.5.
  const std::vector<float> want{0.0f,  0.125f, 0.5f, 1.5f * (3 - 0.75f), 1.5f * (2.5f - 0.75f),
                                1.125f};
  check_close(nn::huber_loss_elementwise(pred, tgt, 1.5), array<float>(want, {3, 2}), 1e-6);
  auto [v, g] = value_and_grad([&](const Array& p) { return nn::huber_loss(p, tgt, 1.5); })(pred);
  double total = 0;
  for (float w : want) total += w;
  CHECK(v.item<float>() == doctest::Approx(total / 6).epsilon(1e-6));
  // d/dp: e within delta, delta * sign(e) beyond; / 6 for the mean.
  check_close(g, array<float>({0, 0.5f / 6, -1.0f / 6, 1.5f / 6, -1.5f / 6, -1.5f / 6}, {3, 2}),
              1e-5);
  CHECK_THROWS_WITH_AS(nn::huber_loss(pred, tgt, 0.0),
                       doctest::Contains("[nn.huber_loss] delta must be > 0, got 0"), ValueError);
}

TEST_CASE(
    "kl_divergence sums targets * (log targets - log predictions) over the last axis, "
    "0 log 0 = 0") {
  const Array logits = array<float>({0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 0.0f}, {2, 3});
  const Array logp = nn::log_softmax(logits);
  const Array targets = array<float>({0.2f, 0.3f, 0.5f, 0.0f, 1.0f, 0.0f}, {2, 3});
  const std::vector<float> lp = logp.to_vector<float>(), t = targets.to_vector<float>();
  std::vector<float> want(2, 0.0f);
  for (int i = 0; i < 6; ++i) {
    if (t[i] > 0) want[i / 3] += t[i] * (std::log(t[i]) - lp[i]);
  }
  const Array per = nn::kl_divergence_per_example(logp, targets);
  check_close(per, array<float>(want, {2}), 1e-6);
  CHECK(nn::kl_divergence(logp, targets).item<float>() ==
        doctest::Approx((want[0] + want[1]) / 2).epsilon(1e-6));
  // d/d(log_predictions) = -targets / 2, finite where targets are 0.
  const Array g = grad([&](const Array& l) { return nn::kl_divergence(l, targets); })(logp);
  check_close(g, targets * -0.5, 1e-6);
  CHECK(nn::kl_divergence(logp, exp(logp)).item<float>() == doctest::Approx(0.0).scale(1.0));
  CHECK_THROWS_WITH_AS(nn::kl_divergence(logp, ones({2, 4})),
                       doctest::Contains("[nn.kl_divergence] log_predictions (2, 3) and targets "
                                         "(2, 4) must have the same shape (..., K)"),
                       ShapeError);
}

TEST_CASE("recurrent and convolution layer errors name the layer and the argument") {
  const nn::GRUCell gru(3, 4, random::key(0));
  CHECK_THROWS_WITH_AS(gru(ones({2, 5}), ones({2, 4})),
                       doctest::Contains("[nn.GRUCell] expected input (..., 3), got (2, 5)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(gru(ones({2, 3}), ones({2, 3})),
                       doctest::Contains("[nn.GRUCell] expected hidden (2, 4), got (2, 3)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(gru(ones({2, 3}), Array()), doctest::Contains("[nn.GRUCell] hidden is None"),
                       ValueError);
  const nn::LSTMCell lstm(3, 4, random::key(0));
  CHECK_THROWS_WITH_AS(lstm(ones({2, 3}), {ones({2, 4}), ones({4})}),
                       doctest::Contains("[nn.LSTMCell] expected c (2, 4), got (4,)"), ShapeError);
  CHECK_THROWS_WITH_AS(lstm(ones({2, 3}, i32), {ones({2, 4}), ones({2, 4})}),
                       doctest::Contains("[nn.LSTMCell] input must be floating, got i32"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(nn::LSTMCell(0, 4, random::key(0)),
                       doctest::Contains("[nn.LSTMCell] input_size and hidden_size must be >= 1, "
                                         "got 0 and 4"),
                       ValueError);
  const nn::ConvTranspose2d up(8, 4, 3, random::key(0));
  CHECK_THROWS_WITH_AS(up(ones({2, 3, 5, 5})),
                       doctest::Contains("[nn.ConvTranspose2d] expected input (N, 8, H, W) or "
                                         "(8, H, W), got (2, 3, 5, 5)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(nn::Conv1d(3, 4, 3, random::key(0), {.groups = 2}),
                       doctest::Contains("[nn.Conv1d] in_channels (3) and out_channels (4) must "
                                         "be >= 1 and divisible by groups (2)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::AdaptiveAvgPool2d({0, 2}),
                       doctest::Contains("[nn.AdaptiveAvgPool2d] target shape must be >= 1, got "
                                         "(0, 2)"),
                       ValueError);
  // One check_positive (modules/functional.cpp) serves the functions and the layers.
  CHECK_THROWS_WITH_AS(nn::MaxPool2d(2, {.stride = {1, 0}}),
                       doctest::Contains("[nn.MaxPool2d] stride must be >= 1, got (1, 0)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::max_pool2d(ones({1, 1, 4, 4}), {0, 2}),
                       doctest::Contains("[max_pool2d] kernel size must be >= 1, got (0, 2)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::conv2d(ones({1, 1, 4, 4}), ones({1, 1, 2, 2}), {.dilation = {0, 1}}),
                       doctest::Contains("[conv2d] dilation must be >= 1, got (0, 1)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(
      nn::conv3d(ones({1, 1, 4, 4, 4}), ones({1, 1, 2, 2, 2}), {.stride = {0, 1, 1}}),
      doctest::Contains("[conv3d] depth stride and dilation must be >= 1, got (0, 1)"),
      ValueError);
}

TEST_CASE("every layer's input errors name the layer, the argument, expected and given") {
  auto text = [](auto&& f) { return testing::error_text(f); };
  const Array x64 = ones({2, 3}, f64);
  const nn::Linear lin(3, 4, random::key(0));
  CHECK(text([&] { lin(x64); }) ==
        "[nn.Linear] input is f64 but weight is f32 (cast one to the other, e.g. the model "
        "with tree::map)");
  const nn::MLP mlp(3, 2, 4, 1, random::key(0));
  CHECK(text([&] { mlp(ones({2, 5})); }) == "[nn.MLP] expected input (..., 3), got (2, 5)");
  CHECK(text([&] { mlp(x64); }).find("[nn.MLP] input is f64 but weight is f32") == 0);
  CHECK(text([&] {
          nn::LayerNorm({3})(x64);
        }).find("[nn.LayerNorm] input is f64 but weight is f32") == 0);
  CHECK(text([&] {
          nn::RMSNorm({4})(ones({2, 3}));
        }) == "[nn.RMSNorm] expected input (..., 4), got (2, 3)");
  CHECK(text([&] {
          nn::GroupNorm(2, 4)(ones({2, 3, 5}));
        }) == "[nn.GroupNorm] input (2, 3, 5) has 3 channels, expected 4");
  nn::State state;
  const nn::BatchNorm bn(4, state);
  CHECK(text([&] { bn(ones({4}), state); }) ==
        "[nn.BatchNorm] expected input (N, 4, ...), got (4,)");
  const nn::Conv2d conv(3, 4, 3, random::key(0));
  CHECK(text([&] {
          conv(ones({1, 3, 2, 2}));
        }) ==
        "[nn.Conv2d] input (1, 3, 2, 2): [conv2d] the (padded) input extent 2 is smaller than "
        "the dilated kernel extent 3 on spatial axis 0");
  CHECK(text([&] {
          conv(ones({1, 3, 5, 5}, f64));
        }).find("[nn.Conv2d] input is f64 but weight is f32") == 0);
  CHECK(text([&] {
          nn::Conv1d(3, 4, 3, random::key(0))(ones({2, 3, 4, 4}));
        }) == "[nn.Conv1d] expected input (N, 3, L) or (3, L), got (2, 3, 4, 4)");
  CHECK(text([&] {
          nn::Conv3d(2, 4, 3, random::key(0))(ones({2, 3, 4, 4, 4}));
        }) == "[nn.Conv3d] expected input (N, 2, D, H, W) or (2, D, H, W), got (2, 3, 4, 4, 4)");
  CHECK(text([&] {
          nn::MaxPool2d(3)(ones({1, 2, 2, 2}));
        }).find("[nn.MaxPool2d] input (1, 2, 2, 2): ") == 0);
  CHECK(text([&] {
          nn::AvgPool2d(2)(ones({2, 2}, i32));
        }) == "[nn.AvgPool2d] input must be floating, got i32 of shape (2, 2)");
  CHECK(text([&] {
          nn::AdaptiveAvgPool2d({2, 2})(ones({4}));
        }) == "[nn.AdaptiveAvgPool2d] expected input (N, C, H, W) or (C, H, W), got (4,)");
  const nn::GRUCell gru(3, 4, random::key(0));
  CHECK(text([&] {
          gru(ones({2, 3}), ones({2, 4}, f64));
        }) ==
        "[nn.GRUCell] hidden is f64 but input is f32 (cast one to the other, e.g. the model "
        "with tree::map)");
  CHECK(text([&] {
          gru(x64, ones({2, 4}, f64));
        }).find("[nn.GRUCell] input is f64 but weight_ih is f32") == 0);
  const nn::Embedding emb(5, 2, random::key(0));
  CHECK(text([&] { emb(ones({3})); }) ==
        "[nn.Embedding] indices must be i32 or u32, got f32 of shape (3,)");
  CHECK(text([&] { nn::Dropout(0.5)(ones({2}, i32), random::key(0)); }) ==
        "[nn.Dropout] input must be floating, got i32 of shape (2,)");
  const nn::MultiheadAttention mha(2, 4, random::key(0));
  const Array q = ones({3, 4});
  CHECK(text([&] {
          mha(q, astype(q, f64), q);
        }).find("[nn.MultiheadAttention] key is f64 but its projection's weight is f32") == 0);
  CHECK(text([&] {
          mha(q, q, q, ones({2, 3, 4}) > 0.0);
        }) ==
        "[nn.MultiheadAttention] mask (2, 3, 4) does not broadcast to (2, 3, 3) = (..., heads, "
        "Sq, Sk)");
}
