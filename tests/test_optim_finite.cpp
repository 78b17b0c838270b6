// Mixed-precision helpers of kiln::optim: apply_if_finite (optax semantics,
// worked out by hand from optax.apply_if_finite's update rule) and
// DynamicLossScale / all_finite (from jmp.DynamicLossScale.adjust), each
// eagerly and inside one jitted program.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <limits>
#include <sstream>
#include <vector>

using namespace kiln;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct GradTree {
  Array w, b;
  KILN_MODULE(GradTree, w, b);
};

GradTree grads(std::vector<float> w, float b) {
  const std::int64_t n = static_cast<std::int64_t>(w.size());
  return GradTree{array<float>(w, {n}), array<float>({b})};
}

std::int32_t scalar_i32(const optim::State& s, const char* name) {
  return s.stages[0].scalars.at(name).item<std::int32_t>();
}

// chain(apply_if_finite, trace(0.9), scale_by_learning_rate(0.1)).
const optim::GradientTransformation& guarded_momentum() {
  static const auto opt = optim::apply_if_finite(optim::sgd(0.1, 0.9), 1);
  return opt;
}

void check_near(const Array& got, const std::vector<float>& want) {
  const std::vector<float> g = got.to_vector<float>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      CHECK(std::isnan(g[i]));
    } else {
      CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  }
}

// The four steps of the apply_if_finite tests: finite; NaN (skipped); NaN
// again, now past max_consecutive_errors = 1 (applied); finite.
std::vector<GradTree> four_steps() {
  return {grads({1, 2}, 0.5f), grads({kNan, 1}, 1.0f), grads({2, 0}, kNan),
          grads({1, 1}, 1.0f)};
}

// Runs the four steps with `update`, checking every update and the state's
// record after each. trace = g + 0.9 * trace; update = -0.1 * trace.
template <class Update>
void check_four_steps(Update&& update) {
  optim::State s =
      guarded_momentum().init(optim::gradient_template(grads({0, 0}, 0)));
  const TreeDef structure = tree::structure(s);
  const std::vector<GradTree> g = four_steps();
  // 1: finite. trace = g.
  GradTree u;
  std::tie(u, s) = update(g[0], s);
  check_near(u.w, {-0.1f, -0.2f});
  check_near(u.b, {-0.05f});
  CHECK(scalar_i32(s, "notfinite_count") == 0);
  CHECK(s.stages[0].scalars.at("last_finite").item<bool>());
  // 2: a NaN: zero update, the momentum kept as after step 1.
  std::tie(u, s) = update(g[1], s);
  check_near(u.w, {0, 0});
  check_near(u.b, {0});
  check_near(s.stages[1].leaves.at("trace")[0], {1, 2});
  check_near(s.stages[1].leaves.at("trace")[1], {0.5f});
  CHECK(scalar_i32(s, "notfinite_count") == 1);
  CHECK_FALSE(s.stages[0].scalars.at("last_finite").item<bool>());
  CHECK(scalar_i32(s, "total_notfinite") == 1);
  // 3: a second NaN in a row: 2 > max_consecutive_errors, so it is applied.
  // trace_w = [2, 0] + 0.9 * [1, 2] = [2.9, 1.8]; trace_b = NaN.
  std::tie(u, s) = update(g[2], s);
  check_near(u.w, {-0.29f, -0.18f});
  check_near(u.b, {kNan});
  CHECK(scalar_i32(s, "notfinite_count") == 2);
  CHECK(scalar_i32(s, "total_notfinite") == 2);
  // 4: finite again: the run restarts, the total stays.
  // trace_w = [1, 1] + 0.9 * [2.9, 1.8] = [3.61, 2.62].
  std::tie(u, s) = update(g[3], s);
  check_near(u.w, {-0.361f, -0.262f});
  CHECK(scalar_i32(s, "notfinite_count") == 0);
  CHECK(s.stages[0].scalars.at("last_finite").item<bool>());
  CHECK(scalar_i32(s, "total_notfinite") == 2);
  CHECK(tree::structure(s) == structure);
}

}  // namespace

TEST_CASE(
    "apply_if_finite skips a non-finite step (zero update, inner state kept) "
    "and applies it after max_consecutive_errors in a row, as optax") {
  check_four_steps([](const GradTree& g, const optim::State& s) {
    return guarded_momentum().update(g, s);
  });
}

TEST_CASE(
    "apply_if_finite under filter_jit: finite and non-finite steps are one "
    "program with the eager values") {
  auto step = filter_jit(debug::assert_max_traces(
      [](const GradTree& g, const optim::State& s) {
        return guarded_momentum().update(g, s);
      },
      1));
  check_four_steps([&](const GradTree& g, const optim::State& s) {
    auto [u, next] = step(g, s);
    return std::pair{u, next};
  });
  CHECK(step.trace_count() == 1);
}

TEST_CASE("apply_if_finite keeps adam's count on a skipped step") {
  const auto opt = optim::apply_if_finite(optim::adam(0.1), 3);
  optim::State s = opt.init(optim::gradient_template(grads({0, 0}, 0)));
  s = opt.update(grads({1, 2}, 1), s).second;
  s = opt.update(grads({kInf, 2}, 1), s).second;
  CHECK(s.stages[1].scalars.at("count").item<std::int32_t>() == 1);
  check_near(s.stages[1].leaves.at("mu")[0], {0.1f, 0.2f});
  // The next finite step is adam's second: update = -0.1 * m_hat /
  // (sqrt(v_hat) + eps) with the same gradient twice, i.e. -0.1 * sign(g).
  auto [u, next] = opt.update(grads({1, 2}, 1), s);
  check_near(u.w, {-0.1f, -0.1f});
  CHECK(next.stages[1].scalars.at("count").item<std::int32_t>() == 2);
}

TEST_CASE("apply_if_finite prints, and refuses a negative error budget") {
  std::ostringstream os;
  os << optim::apply_if_finite(optim::sgd(0.5), 2);
  CHECK(os.str() ==
        "chain(apply_if_finite(max_consecutive_errors=2, over the next 1 "
        "stages), scale_by_learning_rate(0.5))");
  CHECK_THROWS_WITH_AS(optim::apply_if_finite(optim::sgd(0.5), -1),
                       "[optim.apply_if_finite] max_consecutive_errors must "
                       "be >= 0, got -1",
                       ValueError);
}

TEST_CASE("all_finite is false for any inf or NaN in a floating leaf") {
  CHECK(optim::all_finite(grads({1, 2}, 3)).item<bool>());
  CHECK_FALSE(optim::all_finite(grads({1, kInf}, 3)).item<bool>());
  CHECK_FALSE(optim::all_finite(grads({1, 2}, kNan)).item<bool>());
  CHECK_FALSE(optim::all_finite(astype(array<float>({70000.0f}), f16))
                  .item<bool>());  // past f16's 65504
  // Integer leaves and None are finite; so is an empty tree.
  CHECK(optim::all_finite(GradTree{array<std::int32_t>({7}), Array()})
            .item<bool>());
  CHECK(optim::all_finite(std::vector<Array>{}).item<bool>());
}

TEST_CASE("DynamicLossScale scales, unscales trees and keeps None") {
  const optim::DynamicLossScale ls(1024);
  const Array h = astype(array<float>({0.5f, -3.0f}), f16);
  const Array scaled = ls.scale(h);
  CHECK(scaled.dtype() == f16);
  CHECK(astype(scaled, f32).to_vector<float>() ==
        std::vector<float>{512.0f, -3072.0f});
  const GradTree p = ls.unscale(GradTree{array<float>({2048.0f}), Array()});
  CHECK(p.w.to_vector<float>() == std::vector<float>{2.0f});
  CHECK(p.b.is_null());
}

namespace {
// scale and counter after each step of `finite` from DynamicLossScale(1024,
// period 2, factor 2, min 256), as jmp: finite -> counter + 1, the scale
// doubled when the counter was period - 1; non-finite -> halved, floored at
// min, counter 0.
struct Expect {
  bool finite;
  float scale;
  std::int32_t counter;
};
const std::vector<Expect>& loss_scale_steps() {
  static const std::vector<Expect> steps = {
      {true, 1024, 1}, {true, 2048, 0}, {false, 1024, 0},
      {false, 512, 0}, {false, 256, 0}, {false, 256, 0},
      {true, 256, 1},  {true, 512, 0},  {true, 512, 1},
  };
  return steps;
}
}  // namespace

TEST_CASE(
    "DynamicLossScale.adjust halves on overflow down to the floor and doubles "
    "after period finite steps, eagerly and as one jitted program") {
  auto jitted = filter_jit(debug::assert_max_traces(
      [](const optim::DynamicLossScale& ls, const Array& finite) {
        return ls.adjust(finite);
      },
      1));
  optim::DynamicLossScale eager(1024, 2, 2.0, 256), jit = eager;
  for (const Expect& e : loss_scale_steps()) {
    const Array finite = full(Shape{}, e.finite ? 1 : 0, DType::kBool);
    eager = eager.adjust(finite);
    jit = jitted(jit, finite);
    for (const optim::DynamicLossScale* ls : {&eager, &jit}) {
      CHECK(ls->loss_scale.item<float>() == e.scale);
      CHECK(ls->counter.item<std::int32_t>() == e.counter);
    }
  }
  CHECK(jitted.trace_count() == 1);
}

TEST_CASE("DynamicLossScale does not grow past f32 and refuses bad settings") {
  optim::DynamicLossScale ls(3e38, 1);
  ls = ls.adjust(full(Shape{}, 1, DType::kBool));
  CHECK(ls.loss_scale.item<float>() == 3e38f);
  CHECK_THROWS_WITH_AS(optim::DynamicLossScale(1024, 0),
                       doctest::Contains("[optim.DynamicLossScale] needs "
                                         "initial_scale > 0, period >= 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(optim::DynamicLossScale(1024, 10, 1.0),
                       doctest::Contains("factor 1"), ValueError);
}
