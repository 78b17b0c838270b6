// kiln::optim against Optax: five steps of each optimizer on the same params
// and gradients as tests/golden/make_optax_golden.py, and schedule values.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>

#include "golden_file.hpp"

using namespace kiln;

namespace {

struct Params {
  Array w, b;
  KILN_MODULE(Params, w, b);
};

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

// Runs `opt` for five steps on the case's params and gradients; compares every
// update and the final params, and checks that the state keeps one structure.
void check_against_optax(const std::string& c,
                         const optim::GradientTransformation& opt) {
  Params params{load(c, "param_w"), load(c, "param_b")};
  optim::State state = opt.init(optim::gradient_template(params));
  const TreeDef first = tree::structure(state);
  for (int t = 0; t < 5; ++t) {
    const std::string s = std::to_string(t);
    Params g{load(c, "grad" + s + "_w"), load(c, "grad" + s + "_b")};
    auto [updates, next] = opt.update(g, state, params);
    check_close(updates.w, record(c, "update" + s + "_w"),
                c + " update" + s + " w");
    check_close(updates.b, record(c, "update" + s + "_b"),
                c + " update" + s + " b");
    params = optim::apply_updates(params, updates);
    state = std::move(next);
    CHECK(tree::structure(state) == first);
  }
  check_close(params.w, record(c, "final_w"), c + " final w");
  check_close(params.b, record(c, "final_b"), c + " final b");
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
  };
  for (const auto& [name, schedule] : cases) {
    for (int t = 0; t < 12; ++t) {
      const double want = record(name, "value" + std::to_string(t)).values[0];
      const double got = schedule.at(t);
      INFO(name << " at step " << t << ": kiln " << got << ", optax " << want);
      CHECK(std::abs(got - want) <= 1e-6 * std::abs(want) + 1e-7);
    }
  }
}
