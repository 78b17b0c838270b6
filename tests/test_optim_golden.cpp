// kiln::optim against Optax: five steps of each optimizer on the same params
// and gradients as tests/golden/make_optax_golden.py, and schedule values.
// The kiln params also hold a None leaf and a Frozen leaf (Optax's tree has
// only w and b): every optimizer must give them no update and no state.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <map>

#include "golden_file.hpp"

using namespace kiln;

namespace {

struct Params {
  Array w, b;
  Array none;            // None: no gradient, no state
  Frozen<Array> frozen;  // no gradient; stays bit for bit
  KILN_MODULE(Params, w, b, none, frozen);
};

bool same_bits(const Array& a, const Array& b) {
  const std::vector<float> x = a.to_vector<float>();
  const std::vector<float> y = b.to_vector<float>();
  return x.size() == y.size() &&
         std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

const testing::GoldenFile& golden() {
  static const testing::GoldenFile file =
      testing::load_golden_file("optax.txt");
  return file;
}

const testing::GoldenRecord& record(const std::string& c,
                                    const std::string& name) {
  const auto& file = golden();
  auto it = file.find(c);
  REQUIRE_MESSAGE(it != file.end(), "no case " << c << " in optax.txt");
  auto r = it->second.find(name);
  REQUIRE_MESSAGE(r != it->second.end(), "no record " << c << " " << name);
  return r->second;
}

Array load(const std::string& c, const std::string& name) {
  const testing::GoldenRecord& r = record(c, name);
  std::vector<float> v(r.values.begin(), r.values.end());
  return array<float>(v, r.shape);
}

// f32 rounding differences only: relative 1e-5, plus a floor for values that
// cancel to near zero.
void check_close(const Array& got, const testing::GoldenRecord& want,
                 const std::string& what) {
  REQUIRE(got.shape() == want.shape);
  const std::vector<float> g = got.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO(what << " element " << i << ": kiln " << g[i] << ", optax "
              << want.values[i]);
    CHECK(std::abs(g[i] - want.values[i]) <=
          1e-5 * std::abs(want.values[i]) + 1e-8);
  }
}

bool has_record(const std::string& c, const std::string& name) {
  auto it = golden().find(c);
  return it != golden().end() && it->second.count(name) > 0;
}

// Runs `opt` for five steps on the case's params and gradients; compares every
// update and the final params, and checks that the state keeps one structure.
// `before_step(t, state)` may change the state first (run-time
// hyperparameters); `ema_decay`, when the case has ema<t> records, checks an
// EMA of the params kept with incremental_update.
void check_against_optax(
    const std::string& c, const optim::GradientTransformation& opt,
    const std::function<optim::State(int, const optim::State&)>& before_step =
        nullptr,
    double ema_decay = 0.0) {
  Params params;
  params.w = load(c, "param_w");
  params.b = load(c, "param_b");
  params.frozen.value = array<float>({-0.0f, 2.5f});
  const Params original = params;
  optim::State state = opt.init(optim::gradient_template(params));
  const TreeDef first = tree::structure(state);
  Params ema = params;
  for (int t = 0; t < 5; ++t) {
    const std::string s = std::to_string(t);
    if (before_step) state = before_step(t, state);
    Params g = optim::gradient_template(params);
    g.w = load(c, "grad" + s + "_w");
    g.b = load(c, "grad" + s + "_b");
    auto [updates, next] = opt.update(g, state, params);
    CHECK(updates.none.is_null());
    CHECK(updates.frozen->is_null());
    check_close(updates.w, record(c, "update" + s + "_w"),
                c + " update" + s + " w");
    check_close(updates.b, record(c, "update" + s + "_b"),
                c + " update" + s + " b");
    params = optim::apply_updates(params, updates);
    state = std::move(next);
    CHECK(tree::structure(state) == first);
    if (has_record(c, "ema" + s + "_w")) {
      ema = optim::incremental_update(params, ema, 1.0 - ema_decay);
      check_close(ema.w, record(c, "ema" + s + "_w"), c + " ema" + s + " w");
      check_close(ema.b, record(c, "ema" + s + "_b"), c + " ema" + s + " b");
    }
  }
  check_close(params.w, record(c, "final_w"), c + " final w");
  check_close(params.b, record(c, "final_b"), c + " final b");
  CHECK(params.none.is_null());
  CHECK(same_bits(*params.frozen, *original.frozen));
}

}  // namespace

TEST_CASE("adam and adamw updates over five steps equal Optax's") {
  check_against_optax("adam", optim::adam(1e-2));
  check_against_optax("adamw", optim::adamw(1e-2, 0.9, 0.999, 1e-8, 0.1));
}

TEST_CASE(
    "adamw with a weight-decay mask by path equals Optax's mask={'w': True}") {
  check_against_optax(
      "adamw_masked",
      optim::adamw(1e-2, 0.9, 0.999, 1e-8, 0.1, optim::Mask::by_paths({"w"})));
}

TEST_CASE("sgd with momentum, and with nesterov momentum, equals Optax's") {
  check_against_optax("sgd_momentum", optim::sgd(0.1, 0.9));
  check_against_optax("sgd_nesterov", optim::sgd(0.1, 0.9, true));
}

TEST_CASE("rmsprop, with and without momentum, equals Optax's") {
  check_against_optax("rmsprop", optim::rmsprop(1e-2));
  check_against_optax("rmsprop_momentum",
                      optim::rmsprop(1e-2, 0.8, 1e-8, 0.0, 0.5));
}

TEST_CASE(
    "clip_by_global_norm chained with sgd clips exactly the steps Optax "
    "clips") {
  check_against_optax("clip_sgd", optim::chain(optim::clip_by_global_norm(1.0),
                                               optim::sgd(0.1)));
}

TEST_CASE(
    "learning-rate schedules driven by the state's step count equal Optax's") {
  check_against_optax(
      "adam_warmup_cosine",
      optim::adam(optim::warmup_cosine_decay_schedule(0.0, 0.1, 2, 5, 0.01)));
  check_against_optax("sgd_piecewise",
                      optim::sgd(optim::piecewise_constant_schedule(
                          0.1, {{2, 0.5}, {4, 0.1}})));
}

TEST_CASE("schedule values at steps 0..11 equal Optax's") {
  const std::vector<std::pair<std::string, optim::Schedule>> cases = {
      {"sched_linear", optim::linear_schedule(1.0, 0.1, 6, 2)},
      {"sched_cosine", optim::cosine_decay_schedule(0.5, 8, 0.1)},
      {"sched_cosine_exponent", optim::cosine_decay_schedule(0.5, 8, 0.0, 2.0)},
      {"sched_warmup_cosine",
       optim::warmup_cosine_decay_schedule(0.0, 1.0, 3, 10, 0.05)},
      {"sched_piecewise",
       optim::piecewise_constant_schedule(2.0, {{3, 0.5}, {7, 0.25}})},
      {"sched_join",
       optim::join_schedules(
           {optim::constant_schedule(0.3), optim::linear_schedule(0.3, 0.0, 4)},
           {5})},
      {"sched_linear_onecycle", optim::linear_onecycle_schedule(10, 1.0)},
      {"sched_cosine_onecycle",
       optim::cosine_onecycle_schedule(9, 0.8, 0.4, 10.0)},
      {"sched_piecewise_interpolate_linear",
       optim::piecewise_interpolate_schedule("linear", 2.0,
                                             {{2, 0.5}, {5, 3.0}, {6, 0.1}})},
      {"sched_piecewise_interpolate_cosine",
       optim::piecewise_interpolate_schedule("cosine", 2.0,
                                             {{3, 0.5}, {4, 2.0}, {9, 0.0}})},
  };
  for (const auto& [name, schedule] : cases) {
    // The same schedule with its numbers read from arrays, as
    // inject_hyperparams keeps them in the state (f32 arithmetic throughout).
    std::map<std::string, Array> numbers;
    for (const optim::Schedule::Parameter& p : schedule.parameters()) {
      numbers[p.name] = full(Shape{}, p.value, p.integer ? i32 : f32);
    }
    for (int t = 0; t < 12; ++t) {
      const double want = record(name, "value" + std::to_string(t)).values[0];
      const double got = schedule.at(t);
      INFO(name << " at step " << t << ": kiln " << got << ", optax " << want);
      CHECK(std::abs(got - want) <= 1e-6 * std::abs(want) + 1e-7);
      const double dynamic =
          schedule(scalar<std::int32_t>(t), [&](const std::string& n) {
            return numbers.at(n);
          }).item<float>();
      INFO("with run-time numbers: " << dynamic);
      CHECK(std::abs(dynamic - want) <= 1e-5 * std::abs(want) + 1e-7);
    }
  }
}

// ---- issue 18 ----

TEST_CASE(
    "lion, with default and with custom betas and weight decay, equals "
    "Optax's") {
  check_against_optax("lion", optim::lion(1e-2));
  check_against_optax("lion_decay", optim::lion(1e-2, 0.8, 0.95, 0.1));
}

TEST_CASE(
    "adagrad equals Optax's, and an EMA of its params equals "
    "incremental_update's") {
  check_against_optax("adagrad", optim::adagrad(0.1), nullptr, 0.9);
}

TEST_CASE("sgd with weight decay before momentum equals Optax's chain") {
  check_against_optax("sgd_weight_decay", optim::sgdw(0.1, 0.05, 0.9));
}

TEST_CASE("elementwise clip chained with sgd equals Optax's") {
  check_against_optax("clip_elementwise_sgd",
                      optim::chain(optim::clip(0.5), optim::sgd(0.1)));
}

TEST_CASE("one-cycle schedules driving an optimizer equal Optax's") {
  check_against_optax("adam_linear_onecycle",
                      optim::adam(optim::linear_onecycle_schedule(5, 0.1)));
  check_against_optax("sgd_cosine_onecycle",
                      optim::sgd(optim::cosine_onecycle_schedule(5, 0.1)));
}

TEST_CASE("lamb equals Optax's") {
  check_against_optax("lamb", optim::lamb(1e-2, 0.9, 0.999, 1e-6, 0.0, 0.01));
}

TEST_CASE(
    "adafactor (w factored into rows and columns, b not) equals Optax's") {
  optim::AdafactorOptions o;
  o.min_dim_size_to_factor = 2;
  check_against_optax("adafactor", optim::adafactor(1e-2, o));
  o.momentum = 0.9;
  o.weight_decay_rate = 0.01;
  o.clipping_threshold = 0.5;
  o.decay_rate = 0.7;
  check_against_optax("adafactor_momentum", optim::adafactor(1e-2, o));
}

TEST_CASE(
    "multi_steps accumulates k gradients and steps the inner optimizer on "
    "every k-th, as Optax's MultiSteps") {
  check_against_optax("multi_steps", optim::multi_steps(optim::adam(1e-2), 2));
  check_against_optax("multi_steps_sum",
                      optim::multi_steps(optim::sgd(0.1, 0.9), 3, false));
}

TEST_CASE("ema of the updates, with and without debiasing, equals Optax's") {
  check_against_optax("ema_sgd",
                      optim::chain(optim::ema(0.9), optim::sgd(0.1)));
  check_against_optax("ema_nodebias_sgd",
                      optim::chain(optim::ema(0.8, false), optim::sgd(0.1)));
}

TEST_CASE(
    "multi_transform runs adam on w and sgd with momentum on b, as Optax's") {
  check_against_optax("multi_transform",
                      optim::multi_transform({{"adam", optim::adam(1e-2)},
                                              {"sgd", optim::sgd(0.1, 0.9)}},
                                             {{"w", "adam"}, {"b", "sgd"}}));
}

TEST_CASE(
    "inject_hyperparams: weight decay, b1, b2 and the learning rate changed "
    "between steps equal Optax's") {
  const auto opt = optim::inject_hyperparams(
      optim::adamw(1e-2, 0.9, 0.999, 1e-8, 0.1), {"weight_decay", "b1", "b2"});
  check_against_optax("inject_adamw", opt, [](int t, const optim::State& s) {
    if (t == 2) {
      return optim::set_hyperparameter(
          optim::set_hyperparameter(s, "weight_decay", 0.3), "b1", 0.5);
    }
    if (t == 3) {
      return optim::set_learning_rate(optim::set_hyperparameter(s, "b2", 0.9),
                                      0.02);
    }
    return s;
  });
}
