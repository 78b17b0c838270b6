// kiln::optim's issue-18 behaviour beyond the Optax values
// (test_optim_golden.cpp): run-time hyperparameters and gradient accumulation
// inside one jitted step (no retrace), the state layout of adafactor and
// multi_steps, multi_transform's labels, printing, and the error messages.
#include <doctest/doctest.h>

#include "error_text.hpp"

#include <kiln/kiln.hpp>
#include <sstream>
#include <string>

using namespace kiln;
using kiln::testing::error_text;

namespace {

struct Net {
  Array w, b;
  Array none;
  Frozen<Array> frozen;
  KILN_MODULE(Net, w, b, none, frozen);
};

Net make_net() {
  Net n;
  n.w = array<float>({0.5f, -0.25f, 1.0f, 0.75f, -0.5f, 0.125f}, {2, 3});
  n.b = array<float>({0.1f, -0.2f, 0.3f});
  n.frozen.value = array<float>({1.0f});
  return n;
}

Array loss(const Net& n, const Array& x) {
  const Array y = tanh(matmul(x, n.w) + n.b) * *n.frozen;
  return mean(y * y);
}

const Array& batch() {
  static const Array x = array<float>({1.0f, 2.0f, -1.0f, 0.5f}, {2, 2});
  return x;
}

template <class T>
std::string printed(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string_view label_by_rank(std::string_view, const Array& leaf) {
  return leaf.ndim() >= 2 ? "matrix" : "vector";
}

auto make_step(const optim::GradientTransformation& opt) {
  return filter_jit(
      debug::assert_max_traces(
          [opt](const Net& n, const optim::State& s, const Array& x) {
            const Net g = grad(loss)(n, x);
            auto [updates, next] = opt.update(g, s, n);
            return std::tuple{optim::apply_updates(n, updates), next, updates};
          },
          1),
      {.name = "train_step", .arg_names = {"net", "state", "x"}});
}

}  // namespace

TEST_CASE(
    "inject_hyperparams: weight decay, b1 and b2 change between jitted steps "
    "with no retrace, and the eager steps agree") {
  const auto opt = optim::inject_hyperparams(
      optim::adamw(0.05, 0.9, 0.999, 1e-8, 0.1), {"weight_decay", "b1", "b2"});
  auto step = make_step(opt);
  Net net = make_net(), eager = net;
  optim::State state = opt.init(optim::gradient_template(net));
  optim::State es = state;
  CHECK(optim::hyperparameter(state, "weight_decay").item<float>() == 0.1f);
  for (int t = 0; t < 4; ++t) {
    if (t == 2) {
      state = optim::set_hyperparameter(state, "weight_decay", 0.5);
      state = optim::set_hyperparameter(state, "b1", 0.5);
      es = optim::set_hyperparameter(
          optim::set_hyperparameter(es, "weight_decay", 0.5), "b1", 0.5);
    }
    if (t == 3) {
      state = optim::set_hyperparameter(state, "b2", 0.9);
      es = optim::set_hyperparameter(es, "b2", 0.9);
    }
    Net updates;
    std::tie(net, state, updates) = step(net, state, batch());
    auto [eu, enext] = opt.update(grad(loss)(eager, batch()), es, eager);
    eager = optim::apply_updates(eager, eu);
    es = enext;
    const std::vector<float> a = updates.w.to_vector<float>();
    const std::vector<float> b = eu.w.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i)
      CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
    CHECK(updates.none.is_null());
    CHECK(updates.frozen->is_null());
  }
  CHECK(step.trace_count() == 1);
  CHECK(optim::hyperparameter(state, "b1").item<float>() == 0.5f);
  // The weight decay is read from the state: a larger one moves w further.
  const optim::State base = opt.init(optim::gradient_template(net));
  const Net zero_grad = optim::gradient_template(net);
  const Array u1 = opt.update(zero_grad, base, net).first.w;
  const Array u2 =
      opt.update(zero_grad,
                 optim::set_hyperparameter(base, "weight_decay", 1.0), net)
          .first.w;
  CHECK(u1.to_vector<float>()[0] != u2.to_vector<float>()[0]);
}

TEST_CASE(
    "multi_steps under filter_jit is one program: every k-th call steps, the "
    "others give zero updates") {
  const auto inner = optim::sgd(0.5);
  const auto opt = optim::multi_steps(inner, 3);
  auto step = make_step(opt);
  Net net = make_net();
  const Net start = net;
  optim::State state = opt.init(optim::gradient_template(net));
  std::vector<Array> grads;
  for (int t = 0; t < 3; ++t) {
    grads.push_back(grad(loss)(net, batch()).w);
    Net updates;
    std::tie(net, state, updates) = step(net, state, batch());
    const std::vector<float> u = updates.w.to_vector<float>();
    if (t < 2) {
      for (float v : u) CHECK(v == 0.0f);
      CHECK(state.stages[0].scalars.at("gradient_step").item<std::int32_t>() ==
            0);
    } else {
      // The mean of the three gradients (all at the start: params unchanged).
      const std::vector<float> g0 = grads[0].to_vector<float>();
      for (std::size_t i = 0; i < u.size(); ++i)
        CHECK(u[i] == doctest::Approx(-0.5 * g0[i]).epsilon(1e-5));
      CHECK(state.stages[0].scalars.at("gradient_step").item<std::int32_t>() ==
            1);
    }
  }
  CHECK(state.stages[0].scalars.at("mini_step").item<std::int32_t>() == 0);
  CHECK(step.trace_count() == 1);
  CHECK(net.frozen->to_vector<float>() == start.frozen->to_vector<float>());
}

TEST_CASE(
    "inject_hyperparams on a schedule: set_schedule changes its numbers with "
    "no retrace") {
  const optim::Schedule first =
      optim::warmup_cosine_decay_schedule(0.0, 0.1, 2, 10, 0.01);
  const optim::Schedule second =
      optim::warmup_cosine_decay_schedule(0.05, 0.5, 3, 20, 0.0);
  const auto opt =
      optim::inject_hyperparams(optim::sgd(first), {"learning_rate"});
  auto step = make_step(opt);
  Net net = make_net();
  optim::State state = opt.init(optim::gradient_template(net));
  for (int t = 0; t < 5; ++t) {
    if (t == 2) state = optim::set_schedule(state, second);
    const Net g = grad(loss)(net, batch());
    Net updates;
    std::tie(net, state, updates) = step(net, state, batch());
    const double lr = (t < 2 ? first : second).at(t);
    const std::vector<float> u = updates.w.to_vector<float>();
    const std::vector<float> gw = g.w.to_vector<float>();
    for (std::size_t i = 0; i < u.size(); ++i)
      CHECK(u[i] == doctest::Approx(-lr * gw[i]).epsilon(1e-5));
  }
  CHECK(step.trace_count() == 1);
  CHECK(
      error_text([&] {
        (void)optim::set_schedule(state, optim::linear_schedule(1, 0, 5));
      })
          .starts_with("[optim.set_schedule] linear(1 -> 0, steps=5, begin=0) "
                       "does not have the shape of the state's schedule"));
  CHECK(error_text([&] {
          (void)optim::set_schedule(
              optim::sgd(first).init(optim::gradient_template(net)), second);
        })
            .starts_with("[optim.set_schedule] this optimizer state has no "
                         "run-time schedule"));
}

TEST_CASE("adafactor keeps row and column moments for factored leaves only") {
  optim::AdafactorOptions o;
  o.min_dim_size_to_factor = 2;
  const auto opt = optim::adafactor(1e-2, o);
  const optim::State s = opt.init(optim::gradient_template(make_net()));
  const auto& leaves = s.stages[0].leaves;
  // slots: w (2, 3), b (3,), none, frozen
  CHECK(leaves.at("v_row")[0].shape() == Shape{2});
  CHECK(leaves.at("v_col")[0].shape() == Shape{3});
  CHECK(leaves.at("v")[0].is_null());
  CHECK(leaves.at("v_row")[1].is_null());
  CHECK(leaves.at("v")[1].shape() == Shape{3});
  CHECK(leaves.at("v")[2].is_null());
  CHECK(leaves.at("v")[3].is_null());
  // Not factored when the second-largest dimension is too small.
  const optim::State unfactored =
      optim::adafactor(1e-2).init(optim::gradient_template(make_net()));
  CHECK(unfactored.stages[0].leaves.at("v")[0].shape() == Shape{2, 3});
}

TEST_CASE(
    "multi_transform by a label function: each leaf gets its label's "
    "optimizer") {
  const auto opt = optim::multi_transform(
      {{"matrix", optim::sgd(1.0)}, {"vector", optim::frozen(optim::Mask{})}},
      label_by_rank);
  const Net net = make_net();
  const Net g = grad(loss)(net, batch());
  auto [updates, next] =
      opt.update(g, opt.init(optim::gradient_template(net)), net);
  CHECK(updates.w.to_vector<float>()[0] == -g.w.to_vector<float>()[0]);
  CHECK(updates.b.is_null());
}

TEST_CASE("issue-18 stages print their settings") {
  CHECK(printed(optim::lion(1e-3)) ==
        "chain(scale_by_lion(b1=0.9, b2=0.99), add_decayed_weights(0.001), "
        "scale_by_learning_rate(0.001))");
  CHECK(printed(optim::multi_steps(optim::sgd(0.1), 4)) ==
        "chain(multi_steps(every_k=4, mean, over the next 1 stages), "
        "scale_by_learning_rate(0.1))");
  CHECK(printed(optim::inject_hyperparams(optim::sgdw(0.1, 0.01),
                                          {"weight_decay"})) ==
        "chain(add_decayed_weights(0.01) with dynamic weight_decay, "
        "scale_by_learning_rate(0.1))");
  CHECK(
      printed(optim::multi_transform({{"a", optim::sgd(0.1)}}, {{"w", "a"}})) ==
      "chain(multi_transform(a), scale_by_learning_rate(0.1) where (label a))");
  CHECK(printed(optim::linear_onecycle_schedule(10, 1.0)) ==
        "linear_interpolate(init=0.04, 3: x25, 8: x0.04, 10: x0.0001)");
  CHECK_FALSE(optim::inject_hyperparams(optim::adam(0.1), {"b1"}) ==
              optim::adam(0.1));
}

TEST_CASE("issue-18 errors name what is missing and what there is") {
  const Net net = make_net();
  const Net tmpl = optim::gradient_template(net);
  SUBCASE("a hyperparameter no stage has") {
    CHECK(error_text([] {
            (void)optim::inject_hyperparams(optim::sgd(0.1), {"b1"});
          }) ==
          "[optim.inject_hyperparams] no stage of scale_by_learning_rate(0.1) "
          "has a hyperparameter 'b1'; they have: learning_rate");
  }
  SUBCASE("setting a hyperparameter that is not run-time") {
    const optim::State s = optim::adamw(0.1).init(tmpl);
    CHECK(error_text([&] {
            (void)optim::set_hyperparameter(s, "weight_decay", 0.2);
          }) ==
          "[optim.set_hyperparameter] this optimizer state has no run-time "
          "'weight_decay'; it has: learning_rate (make one run-time with "
          "optim::inject_hyperparams(opt, {\"weight_decay\"}))");
  }
  SUBCASE("a slot without a label") {
    const auto opt =
        optim::multi_transform({{"a", optim::sgd(0.1)}}, {{"w", "a"}});
    CHECK(error_text([&] { (void)opt.init(tmpl); }) ==
          "[optim.multi_transform] b has no label; the transforms are labelled "
          "a");
  }
  SUBCASE("a label that names no transform") {
    CHECK(
        error_text([] {
          (void)optim::multi_transform({{"a", optim::sgd(0.1)}}, {{"w", "b"}});
        }) ==
        "[optim.multi_transform] path 'w' has label 'b', which names no "
        "transform");
  }
  SUBCASE("a labelled path that names no slot") {
    const auto opt = optim::multi_transform({{"a", optim::sgd(0.1)}},
                                            {{"", "a"}, {"weights", "a"}});
    CHECK(error_text([&] { (void)opt.init(tmpl); }) ==
          "[optim.init] stage 0 (multi_transform): the labelled path 'weights' "
          "names no array slot; the slots are: w, b, none, frozen.value");
  }
  SUBCASE("the trust ratio (lamb) without params") {
    const auto opt =
        optim::chain(optim::scale_by_trust_ratio(), optim::sgd(0.1));
    CHECK(error_text([&] { (void)opt.update(tmpl, opt.init(tmpl)); }) ==
          "[optim.update] stage 0 (scale_by_trust_ratio) needs the parameters: "
          "call opt.update(grads, state, params)");
  }
}
