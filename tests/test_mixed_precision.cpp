// The mixed-precision recipe end to end (docs/MODELS.md, Mixed precision):
// f32 master weights, an f16 (or bf16) copy for the forward and backward pass,
// dynamic loss scaling and apply_if_finite(adam), in one jitted step. Run on
// the CPU and on Vulkan.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <tuple>
#include <vector>

using namespace kiln;

namespace {

constexpr std::int64_t kBatch = 256;
constexpr int kSteps = 150;

// Points in R^4 labelled by which of three fixed directions they lean on most.
std::pair<Array, Array> dataset() {
  const Array x = random::normal(random::key(7), Shape{kBatch, 4});
  const Array directions = array<float>(
      {1, 0, -1, 1, 0.5f, -1, -1, 0.5f, 1, -0.5f, 0, 0.5f}, {4, 3});
  return {x, astype(argmax(matmul(x, directions), 1), i32)};
}

nn::MLP initial_model() { return nn::MLP(4, 3, 32, 1, random::key(1)); }

// H: the 16-bit compute dtype (f16 or bf16).
template <DType H>
Array to_half(const Array& a) {
  return is_inexact(a.dtype()) ? astype(a, H) : a;
}

// The loss of the H copy of `model`, in f32.
template <DType H>
Array half_loss(const nn::MLP& model, const Array& x, const Array& y) {
  const nn::MLP half = tree::map(to_half<H>, model);
  const Array logits = astype(half(astype(x, H)), f32);
  return nn::softmax_cross_entropy_with_integer_labels(logits, y);
}

template <DType H>
Array scaled_loss(const nn::MLP& model, const Array& x, const Array& y,
                  const optim::DynamicLossScale& loss_scale) {
  return loss_scale.scale(half_loss<H>(model, x, y));
}

Array f32_loss(const nn::MLP& model, const Array& x, const Array& y) {
  return nn::softmax_cross_entropy_with_integer_labels(model(x), y);
}

double accuracy(const nn::MLP& model, const Array& x, const Array& y) {
  return mean(astype(argmax(model(x), 1) == y, f32)).item<float>();
}

const optim::GradientTransformation& mixed_opt() {
  static const auto opt = optim::apply_if_finite(optim::adam(1e-2), 100);
  return opt;
}
const optim::GradientTransformation& f32_opt() {
  static const auto opt = optim::adam(1e-2);
  return opt;
}

// The recipe's step: returns (model, state, loss scale, loss, grads finite).
template <DType H>
auto make_mixed_step() {
  return filter_jit(debug::assert_max_traces(
      [](const nn::MLP& model, const optim::State& state,
         const optim::DynamicLossScale& loss_scale, const Array& x,
         const Array& y) {
        auto [scaled, g] = value_and_grad(scaled_loss<H>)(model, x, y, loss_scale);
        g = loss_scale.unscale(g);
        const Array finite = optim::all_finite(g);
        auto [updates, next] = mixed_opt().update(g, state, model);
        return std::tuple{optim::apply_updates(model, updates), next,
                          loss_scale.adjust(finite), loss_scale.unscale(scaled),
                          finite};
      },
      1));
}

// Both runs learn the task and end close to each other (the mixed run computed
// in 16 bits and may have skipped steps).
void check_learns_like_f32(const nn::MLP& model, const nn::MLP& reference, const Array& x,
                           const Array& y, const char* what) {
  const double mixed_acc = accuracy(model, x, y);
  const double f32_acc = accuracy(reference, x, y);
  const double mixed_loss = f32_loss(model, x, y).item<float>();
  const double ref_loss = f32_loss(reference, x, y).item<float>();
  MESSAGE(what, ": accuracy mixed ", mixed_acc, " f32 ", f32_acc, "; loss mixed ", mixed_loss,
          " f32 ", ref_loss);
  CHECK(f32_acc >= 0.9);
  CHECK(std::abs(mixed_acc - f32_acc) <= 0.05);
  CHECK(std::abs(mixed_loss - ref_loss) <= 0.025);
  CHECK(mixed_loss < 0.5 * f32_loss(initial_model(), x, y).item<float>());
}

}  // namespace

TEST_CASE(
    "mixed precision: f16 forward/backward with f32 master weights, loss "
    "scaling and apply_if_finite(adam) trains as well as f32, in one "
    "program, skipping an injected overflow") {
  const auto [x, y] = dataset();
  auto step = make_mixed_step<f16>();
  auto f32_step = filter_jit([](const nn::MLP& model, const optim::State& s,
                                const Array& xb, const Array& yb) {
    auto [loss, g] = value_and_grad(f32_loss)(model, xb, yb);
    auto [updates, next] = f32_opt().update(g, s, model);
    return std::tuple{optim::apply_updates(model, updates), next, loss};
  });

  nn::MLP model = initial_model(), reference = model;
  optim::State state = mixed_opt().init(optim::gradient_template(model));
  optim::State f32_state = f32_opt().init(optim::gradient_template(model));
  // 2^32: the f16 cotangents overflow on the first steps.
  optim::DynamicLossScale loss_scale(std::ldexp(1.0, 32), 50);
  const std::vector<float> w0 = model.layers[0].weight.to_vector<float>();

  Array loss, finite, f32_loss_value;
  std::tie(model, state, loss_scale, loss, finite) =
      step(model, state, loss_scale, x, y);
  CHECK_FALSE(finite.item<bool>());
  CHECK(model.layers[0].weight.to_vector<float>() == w0);  // bit for bit
  CHECK(model.layers[0].weight.dtype() == f32);
  CHECK(loss_scale.loss_scale.item<float>() == std::ldexp(1.0f, 31));
  CHECK(state.stages[1].scalars.at("count").item<std::int32_t>() == 0);
  CHECK(state.stages[0].scalars.at("total_notfinite").item<std::int32_t>() ==
        1);

  int skipped = 1, first_finite = -1;
  for (int t = 1; t < kSteps; ++t) {
    std::tie(model, state, loss_scale, loss, finite) =
        step(model, state, loss_scale, x, y);
    skipped += finite.item<bool>() ? 0 : 1;
    if (first_finite < 0 && finite.item<bool>()) first_finite = t;
  }
  for (int t = 0; t < kSteps; ++t) {
    std::tie(reference, f32_state, f32_loss_value) =
        f32_step(reference, f32_state, x, y);
  }
  CHECK(step.trace_count() == 1);
  // The scale came down until the gradients fit f16 (2^32 / 2^skipped), and
  // stopped: every later step was finite, and each 50 of them doubled it.
  MESSAGE("skipped ", skipped, " steps; loss scale ",
          loss_scale.loss_scale.item<float>());
  CHECK(skipped == first_finite);
  CHECK(skipped < 30);
  CHECK(state.stages[0].scalars.at("total_notfinite").item<std::int32_t>() ==
        skipped);
  CHECK(state.stages[1].scalars.at("count").item<std::int32_t>() ==
        kSteps - skipped);
  CHECK(loss_scale.loss_scale.item<float>() ==
        std::ldexp(1.0f, 32 - skipped + (kSteps - skipped) / 50));

  // Both runs learn the task, and end close: the mixed run took `skipped`
  // fewer steps and computed in f16.
  check_learns_like_f32(model, reference, x, y, "f16");
}

TEST_CASE(
    "mixed precision: bf16 forward/backward with f32 master weights and "
    "apply_if_finite(adam) trains as well as f32; a NaN batch is skipped") {
  // bf16 has f32's exponent range: gradients do not underflow or overflow the
  // way f16's do, so the scale only needs to stay put; what apply_if_finite
  // guards against here is a bad batch.
  constexpr int kBf16Steps = 100;
  const auto [x, y] = dataset();
  auto step = make_mixed_step<bf16>();
  nn::MLP model = initial_model(), reference = model;
  optim::State state = mixed_opt().init(optim::gradient_template(model));
  optim::State f32_state = f32_opt().init(optim::gradient_template(model));
  optim::DynamicLossScale loss_scale(std::ldexp(1.0, 15), 50);
  const std::vector<float> w0 = model.layers[0].weight.to_vector<float>();

  Array loss, finite;
  std::tie(model, state, loss_scale, loss, finite) =
      step(model, state, loss_scale, x * NAN, y);
  CHECK_FALSE(finite.item<bool>());
  CHECK(model.layers[0].weight.to_vector<float>() == w0);  // bit for bit
  CHECK(loss_scale.loss_scale.item<float>() == std::ldexp(1.0f, 14));
  CHECK(state.stages[0].scalars.at("total_notfinite").item<std::int32_t>() == 1);

  int skipped = 0;
  for (int t = 0; t < kBf16Steps; ++t) {
    std::tie(model, state, loss_scale, loss, finite) =
        step(model, state, loss_scale, x, y);
    skipped += finite.item<bool>() ? 0 : 1;
  }
  auto f32_step = filter_jit([](const nn::MLP& m, const optim::State& s,
                                const Array& xb, const Array& yb) {
    auto [l, g] = value_and_grad(f32_loss)(m, xb, yb);
    auto [updates, next] = f32_opt().update(g, s, m);
    return std::tuple{optim::apply_updates(m, updates), next, l};
  });
  Array f32_loss_value;
  for (int t = 0; t < kBf16Steps; ++t) {
    std::tie(reference, f32_state, f32_loss_value) =
        f32_step(reference, f32_state, x, y);
  }
  CHECK(step.trace_count() == 1);
  CHECK(skipped == 0);
  CHECK(model.layers[0].weight.dtype() == f32);
  CHECK(state.stages[1].scalars.at("count").item<std::int32_t>() == kBf16Steps);
  CHECK(loss_scale.loss_scale.item<float>() ==
        std::ldexp(1.0f, 14 + kBf16Steps / 50));

  check_learns_like_f32(model, reference, x, y, "bf16");
}

TEST_CASE("all_finite, DynamicLossScale and apply_if_finite take bf16 gradients") {
  // 3.4e38 rounds past bf16's largest (3.3895e38) to inf.
  CHECK(optim::all_finite(astype(array<float>({1.0f, 3.3e38f}), bf16)).item<bool>());
  CHECK_FALSE(optim::all_finite(astype(array<float>({1.0f, 3.4e38f}), bf16)).item<bool>());
  CHECK_FALSE(optim::all_finite(astype(array<float>({NAN}), bf16)).item<bool>());

  const optim::DynamicLossScale ls(1024);
  const Array scaled = ls.scale(astype(array<float>({0.5f, -3.0f}), bf16));
  CHECK(scaled.dtype() == bf16);
  CHECK(astype(scaled, f32).to_vector<float>() == std::vector<float>{512.0f, -3072.0f});
  const std::vector<Array> unscaled =
      ls.unscale(std::vector<Array>{astype(array<float>({2048.0f, 3.0f}), bf16), Array()});
  CHECK(unscaled[0].dtype() == bf16);
  CHECK(astype(unscaled[0], f32).to_vector<float>() == std::vector<float>{2.0f, 0.0029296875f});
  CHECK(unscaled[1].is_null());

  // bf16 parameters and gradients: a step with an inf is skipped (zero
  // update), a finite one applied in bf16.
  const auto opt = optim::apply_if_finite(optim::sgd(0.5), 3);
  const Array p = astype(array<float>({1.0f, 2.0f}), bf16);
  optim::State s = opt.init(optim::gradient_template(p));
  auto [u1, s1] = opt.update(astype(array<float>({1.0f, INFINITY}), bf16), s, p);
  CHECK(u1.dtype() == bf16);
  CHECK(astype(u1, f32).to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  auto [u2, s2] = opt.update(astype(array<float>({1.0f, 3.0f}), bf16), s1, p);
  CHECK(astype(optim::apply_updates(p, u2), f32).to_vector<float>() ==
        std::vector<float>{0.5f, 0.5f});
  CHECK(s2.stages[0].scalars.at("total_notfinite").item<std::int32_t>() == 1);
}
