// BatchNorm with its running statistics in an nn::State (values against a
// plain C++ reference, the momentum update, inference, a jitted training step
// that traces once, gradients by finite differences, a checkpoint round trip
// of the state), GroupNorm and RMSNorm against references, and their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "check_close.hpp"
#include "finite_diff.hpp"

using namespace kiln;
using testing::check_close;

namespace {

// Per-channel normalisation of x (N, C, L) with the biased variance over
// (N, L), then * w[c] + b[c]: the reference BatchNorm in training mode. Also
// returns the batch means and variances.
struct Normalised {
  std::vector<float> y, mean, var;
};
Normalised batch_norm_reference(const std::vector<float>& x, int n, int c, int l,
                                const std::vector<float>& w, const std::vector<float>& b,
                                double eps) {
  Normalised out{std::vector<float>(x.size()), {}, {}};
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < l; ++j) s += x[(i * c + ch) * l + j];
    const double mu = s / (n * l);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < l; ++j) ss += std::pow(x[(i * c + ch) * l + j] - mu, 2);
    const double var = ss / (n * l);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < l; ++j) {
        const int k = (i * c + ch) * l + j;
        out.y[k] = static_cast<float>((x[k] - mu) / std::sqrt(var + eps) * w[ch] + b[ch]);
      }
    out.mean.push_back(static_cast<float>(mu));
    out.var.push_back(static_cast<float>(var));
  }
  return out;
}

Array vec(const std::vector<float>& v) {
  return array<float>(v, {static_cast<std::int64_t>(v.size())});
}

// A small stateful model: Linear -> BatchNorm -> relu -> Linear.
struct Net {
  nn::Linear in;
  nn::BatchNorm bn;
  nn::Linear out;
  KILN_MODULE(Net, in, bn, out);

  Net() = default;
  Net(const Array& key, nn::State& state)
      : in(3, 4, nn::detail::key_at(random::split(key, 2), 0)),
        bn(4, state, {.momentum = 0.9}),
        out(4, 1, nn::detail::key_at(random::split(key, 2), 1)) {}
};

std::pair<Array, nn::State> net_loss(const Net& m, const nn::State& s, const Array& x,
                                     const Array& y) {
  auto [h, s2] = m.bn(m.in(x), s);
  const Array d = m.out(relu(h)) - y;
  return {mean(d * d), s2};
}

Array batch(int step, std::int64_t rows, std::int64_t cols) {
  std::mt19937 gen(100 + step);
  return testing::uniform_array(gen, {rows, cols}, f32) * 2.0 + 0.5;
}

// Normalises each contiguous block of `block` elements of x (the layout of
// GroupNorm's groups and of RMSNorm's trailing axes).
std::vector<float> normalise_blocks(const std::vector<float>& x, std::size_t block, double eps,
                                    bool rms) {
  std::vector<float> y(x.size());
  for (std::size_t s = 0; s < x.size(); s += block) {
    double mu = 0, ss = 0;
    for (std::size_t k = s; k < s + block; ++k) mu += x[k];
    mu = rms ? 0.0 : mu / static_cast<double>(block);
    for (std::size_t k = s; k < s + block; ++k) ss += (x[k] - mu) * (x[k] - mu);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(block) + eps);
    for (std::size_t k = s; k < s + block; ++k) y[k] = static_cast<float>((x[k] - mu) * inv);
  }
  return y;
}

}  // namespace

TEST_CASE(
    "BatchNorm training normalises each channel over batch and length, and updates the "
    "running statistics with momentum") {
  nn::State state;
  nn::BatchNorm bn(3, state, {.momentum = 0.9});
  CHECK(bn.state_index.name == "BatchNorm_0");
  CHECK(tree::paths(state) == std::vector<std::string>{"entries[\"BatchNorm_0.running_mean\"]",
                                                       "entries[\"BatchNorm_0.running_var\"]"});
  check_close(state.get(bn.state_index, "running_mean"), zeros({3}));
  check_close(state.get(bn.state_index, "running_var"), ones({3}));
  std::mt19937 gen(1);
  const Array x = testing::uniform_array(gen, {4, 3, 5}, f32) * 3.0 + 1.0;
  const std::vector<float> w{0.5f, -1.0f, 2.0f}, b{0.1f, 0.0f, -0.3f};
  bn.weight = vec(w);
  bn.bias = vec(b);
  auto [y, s2] = bn(x, state);
  const Normalised want = batch_norm_reference(x.to_vector<float>(), 4, 3, 5, w, b, 1e-5);
  check_close(y, array<float>(want.y, {4, 3, 5}), 1e-4);
  std::vector<float> mean_want, var_want;
  for (int c = 0; c < 3; ++c) {
    mean_want.push_back(0.1f * want.mean[c]);
    var_want.push_back(0.9f + 0.1f * want.var[c]);
  }
  check_close(s2.get(bn.state_index, "running_mean"), vec(mean_want), 1e-5);
  check_close(s2.get(bn.state_index, "running_var"), vec(var_want), 1e-5);
  // The input state is a value: unchanged.
  check_close(state.get(bn.state_index, "running_mean"), zeros({3}));

  // (N, C) input: statistics over the batch only.
  auto [y2, s3] = bn(reshape(slice_axis(x, 2, 0, 1), {4, 3}), state);
  const Normalised want2 = batch_norm_reference(
      reshape(slice_axis(x, 2, 0, 1), {4, 3}).to_vector<float>(), 4, 3, 1, w, b, 1e-5);
  check_close(y2, array<float>(want2.y, {4, 3}), 1e-4);
}

TEST_CASE("BatchNorm in inference mode uses the running statistics and returns the state as is") {
  nn::State state;
  nn::BatchNorm bn(2, state, {.eps = 1e-3, .inference = true});
  const std::vector<float> rm{1.0f, -2.0f}, rv{4.0f, 0.25f};
  state = state.set(bn.state_index, {{"running_mean", vec(rm)}, {"running_var", vec(rv)}});
  bn.weight = vec({3.0f, 0.5f});
  bn.bias = vec({0.0f, 1.0f});
  const Array x = array<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  auto [y, s2] = bn(x, state);
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<float> want;
  for (std::size_t k = 0; k < xv.size(); ++k) {
    const std::size_t c = (k / 2) % 2;
    const float wc = c == 0 ? 3.0f : 0.5f, bc = c == 0 ? 0.0f : 1.0f;
    want.push_back(static_cast<float>((xv[k] - rm[c]) / std::sqrt(rv[c] + 1e-3) * wc + bc));
  }
  check_close(y, array<float>(want, {2, 2, 2}));
  CHECK(s2.get(bn.state_index, "running_mean").same(state.get(bn.state_index, "running_mean")));
  // The per-call flag overrides the stored one: training uses the batch.
  auto [yt, st] = bn(x, state, /*inference=*/false);
  CHECK(std::abs(mean(slice_axis(yt, 1, 0, 1)).item<float>()) < 1e-5f);
  CHECK(!st.get(bn.state_index, "running_var").same(state.get(bn.state_index, "running_var")));
}

TEST_CASE("a jitted training step with BatchNorm state traces once and matches the eager steps") {
  nn::State state;
  Net model(random::key(3), state);
  const auto opt = optim::sgd(0.1);
  optim::State opt_state = opt.init(optim::gradient_template(model));
  auto step = filter_jit([opt](const Net& m, const nn::State& s, const optim::State& os,
                               const Array& x, const Array& y) {
    auto [value, g] = value_and_grad(net_loss)(m, s, x, y);
    auto [updates, os2] = opt.update(g, os, m);
    return std::tuple{optim::apply_updates(m, updates), value.second, os2, value.first};
  });
  Net eager = model;
  nn::State eager_state = state;
  optim::State eager_opt = opt_state;
  for (int i = 0; i < 5; ++i) {
    const Array x = batch(i, 8, 3), y = batch(50 + i, 8, 1);
    Array loss;
    std::tie(model, state, opt_state, loss) = step(model, state, opt_state, x, y);
    auto [value, g] = value_and_grad(net_loss)(eager, eager_state, x, y);
    auto [updates, os2] = opt.update(g, eager_opt, eager);
    eager = optim::apply_updates(eager, updates);
    eager_state = value.second;
    eager_opt = os2;
    INFO("step " << i);
    CHECK(loss.item<float>() == doctest::Approx(value.first.item<float>()).epsilon(1e-4));
  }
  CHECK(step.trace_count() == 1);
  const nn::StateIndex& idx = model.bn.state_index;
  check_close(state.get(idx, "running_mean"), eager_state.get(idx, "running_mean"), 1e-4);
  check_close(state.get(idx, "running_var"), eager_state.get(idx, "running_var"), 1e-4);
  check_close(model.in.weight, eager.in.weight, 1e-4);
  // Five updates with momentum 0.9 moved the running mean away from zero.
  CHECK(max(abs(state.get(idx, "running_mean"))).item<float>() > 0.01f);

  // Inference: a separate (static) mode, and the state passes through.
  auto eval = filter_jit([](const Net& m, const nn::State& s, const Array& x) {
    auto [h, s2] = m.bn(m.in(x), s, /*inference=*/true);
    return m.out(relu(h));
  });
  const Array x = batch(9, 8, 3);
  const Array rm = state.get(idx, "running_mean"), rv = state.get(idx, "running_var");
  const Array h = (model.in(x)-rm) / sqrt(rv + 1e-5) * model.bn.weight + model.bn.bias;
  check_close(eval(model, state, x), model.out(relu(h)), 1e-4);
}

TEST_CASE("BatchNorm gradients through the batch statistics equal finite differences (f64)") {
  nn::State state;
  const nn::BatchNorm bn(2, state, {.dtype = f64});
  std::mt19937 gen(4);
  const Array x = testing::uniform_array(gen, {3, 2, 2});
  const Array w = testing::uniform_array(gen, {2}), b = testing::uniform_array(gen, {2});
  const Array r = testing::uniform_array(gen, {3, 2, 2});
  testing::check_finite_differences(
      [&](const std::vector<Array>& p) {
        nn::BatchNorm m = bn;
        m.weight = p[1];
        m.bias = p[2];
        return sum(m(p[0], state).first * r);
      },
      {x, w, b}, 1e-5);
  // The running statistics are f64 too, and stay so after a step.
  CHECK(bn(x, state).second.get(bn.state_index, "running_var").dtype() == f64);
}

TEST_CASE("a model and its BatchNorm state round-trip through a checkpoint") {
  nn::State state;
  Net model(random::key(5), state);
  for (int i = 0; i < 3; ++i) state = net_loss(model, state, batch(i, 6, 3), batch(i, 6, 1)).second;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("kiln_bn_state_" + std::to_string(std::random_device{}()) + ".npz");
  CHECK(tree::paths(std::pair{model, state}).back() == "[1].entries[\"BatchNorm_0.running_var\"]");
  save_checkpoint(path, std::pair{model, state});
  // The template: the same model built afresh against a fresh State.
  nn::State fresh;
  const Net like(random::key(6), fresh);
  auto [m2, s2] = load_checkpoint(path, std::pair{like, fresh});
  std::filesystem::remove(path);
  CHECK(m2.bn.state_index.name == "BatchNorm_0");
  for (const char* field : {"running_mean", "running_var"}) {
    INFO(field);
    CHECK(s2.get(m2.bn.state_index, field).to_vector<float>() ==
          state.get(model.bn.state_index, field).to_vector<float>());
  }
  CHECK(m2.in.weight.to_vector<float>() == model.in.weight.to_vector<float>());
  CHECK(s2.get(m2.bn.state_index, "running_var").to_vector<float>() !=
        fresh.get(like.bn.state_index, "running_var").to_vector<float>());
}

TEST_CASE("nn.State keeps its structure: errors name the layer, the entry and both avals") {
  nn::State state;
  const nn::BatchNorm a(4, state), b(4, state);
  CHECK(b.state_index.name == "BatchNorm_1");
  CHECK(state.entries.size() == 4);
  CHECK_THROWS_WITH_AS(a(ones({3, 5}), state),
                       doctest::Contains("[nn.BatchNorm] input (3, 5) has 5 channels, expected 4"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(a(ones({4}), state),
                       doctest::Contains("[nn.BatchNorm] expected input (N, 4, ...), got (4,)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      a(ones({2, 4}, i32), state),
      doctest::Contains("[nn.BatchNorm] input must be floating, got i32 of shape (2, 4)"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      a(ones({2, 4}), nn::State{}),
      doctest::Contains(
          "[nn.BatchNorm] the state has no entry BatchNorm_0.running_mean (was the layer built "
          "with this nn::State?)"),
      ValueError);
  CHECK_THROWS_WITH_AS(
      state.set(a.state_index, {{"running_mean", ones({5})}}),
      doctest::Contains(
          "[nn.State] new state BatchNorm_0.running_mean is f32(5,), expected f32(4,) (a state "
          "keeps the structure it was built with)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      nn::BatchNorm(4, state, {.name = "BatchNorm_1"}),
      doctest::Contains(
          "[nn.State] the state already has entries named BatchNorm_1; give each stateful layer "
          "its own name"),
      ValueError);
  CHECK_THROWS_WITH_AS(nn::BatchNorm(4, state, {.momentum = 1.5}),
                       doctest::Contains("[nn.BatchNorm] momentum must be in [0, 1], got 1.5"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::GroupNorm(3, 4),
                       doctest::Contains("[nn.GroupNorm] channels (4) must "
                                         "be divisible by groups (3)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::GroupNorm(2, 4)(ones({2, 6, 3})),
                       doctest::Contains("[nn.GroupNorm] input (2, 6, 3) has 6 channels, "
                                         "expected 4"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(nn::RMSNorm({8})(ones({2, 4})),
                       doctest::Contains("[nn.RMSNorm] expected input (..., 8), got (2, 4)"),
                       ShapeError);
}

TEST_CASE("GroupNorm normalises each group of channels per example, then scales per channel") {
  nn::GroupNorm gn(2, 4);
  CHECK(gn.weight.to_vector<float>() == std::vector<float>(4, 1.0f));
  std::mt19937 gen(8);
  const Array x = testing::uniform_array(gen, {2, 4, 3}, f32) * 2.0 + 1.0;
  const std::vector<float> w{1.0f, 2.0f, -1.0f, 0.5f}, b{0.0f, 1.0f, 2.0f, 3.0f};
  gn.weight = vec(w);
  gn.bias = vec(b);
  std::vector<float> want = normalise_blocks(x.to_vector<float>(), 2 * 3, 1e-5, false);
  for (std::size_t k = 0; k < want.size(); ++k) {
    const std::size_t c = (k / 3) % 4;
    want[k] = want[k] * w[c] + b[c];
  }
  check_close(gn(x), array<float>(want, {2, 4, 3}), 1e-4);
  // Extra spatial axes join the groups; groups == 1 is LayerNorm over (C, ...).
  const Array x4 = reshape(x, {2, 4, 3, 1});
  check_close(
      nn::GroupNorm(1, 4)(x4),
      reshape(array<float>(normalise_blocks(x.to_vector<float>(), 12, 1e-5, false), {2, 4, 3}),
              {2, 4, 3, 1}),
      1e-4);
  CHECK(nn::GroupNorm(2, 4, 1e-5, /*channelwise_affine=*/false).weight.is_null());
}

TEST_CASE("RMSNorm divides by the root mean square over the trailing axes") {
  nn::RMSNorm rms({4});
  CHECK(rms.bias.to_vector<float>() == std::vector<float>(4, 0.0f));
  const Array x = array<float>({1, -2, 3, 0.5f, 4, 4, -4, 4, 0.1f, 0.2f, 0.3f, 0.4f}, {3, 4});
  rms.weight = vec({1.0f, 2.0f, 0.5f, -1.0f});
  rms.bias = vec({0.0f, 0.1f, 0.0f, 0.2f});
  std::vector<float> want = normalise_blocks(x.to_vector<float>(), 4, 1e-5, true);
  const std::vector<float> w{1.0f, 2.0f, 0.5f, -1.0f}, b{0.0f, 0.1f, 0.0f, 0.2f};
  for (std::size_t k = 0; k < want.size(); ++k) want[k] = want[k] * w[k % 4] + b[k % 4];
  check_close(rms(x), array<float>(want, {3, 4}), 1e-5);
  // Row 1 is (4, 4, -4, 4): its rms is 4.
  CHECK(reshape(slice_axis(nn::RMSNorm({4}, 0.0)(x), 0, 1, 2), {4}).to_vector<float>() ==
        std::vector<float>{1, 1, -1, 1});
  // Gradients flow to the weight: d/dw sum(rms(x)) is the normalised x summed over rows.
  const Array gw = grad([&](const nn::RMSNorm& m) { return sum(m(x)); })(rms).weight;
  check_close(gw, sum(nn::RMSNorm({4}, 1e-5, false, false)(x), 0), 1e-5);
}
