// kiln::optim: gradient templates and the seed-2 scenario (state structure
// stable from step one; the params-shaped state is rejected naming the paths),
// frozen and masked leaves, the optimizer as a static value, dynamic learning
// rates, and the error messages.
#include <doctest/doctest.h>

#include "error_text.hpp"

#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>

using namespace kiln;
using kiln::testing::error_text;

namespace {

struct Layer {
  Array weight, bias;
  KILN_MODULE(Layer, weight, bias);
};

// A Frozen subtree, an integer array and a static callable: the three kinds of
// slot that get no gradient.
struct Model {
  Frozen<Layer> embed;
  Layer head;
  Array step;  // i32
  Array (*activation)(const Array&) = nullptr;
  KILN_MODULE(Model, embed, head, step, activation);
};

Model make_model() {
  Model m;
  m.embed->weight =
      array<float>({0.5f, -0.25f, 1.0f, 0.75f, -0.5f, 0.125f}, {2, 3});
  m.embed->bias = array<float>({0.1f, -0.2f, 0.3f});
  m.head.weight = array<float>({1.0f, -1.0f, 0.5f}, {3, 1});
  m.head.bias =
      array<float>({-0.0f});  // -0.0: an update of +0 would flip its bit
  m.step = array<std::int32_t>({7});
  m.activation = tanh;
  return m;
}

Array loss(const Model& m, const Array& x) {
  const Array h = m.activation(matmul(x, m.embed->weight) + m.embed->bias);
  const Array y = matmul(h, m.head.weight) + m.head.bias;
  return mean(y * y) + sum(m.head.bias * m.head.bias);
}

const Array& batch() {
  static const Array x =
      array<float>({1.0f, 2.0f, -1.0f, 0.5f, 0.0f, 3.0f}, {3, 2});
  return x;
}

bool same_bits(const Array& a, const Array& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<float> x = a.to_vector<float>();
  const std::vector<float> y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

bool ends_with_bias(std::string_view path, const Array&) {
  return path.ends_with("bias");
}
bool is_matrix(const Array& a) { return a.ndim() == 2; }

}  // namespace

TEST_CASE(
    "gradient_template has exactly the structure grad returns, zeros where "
    "grad has arrays") {
  const Model model = make_model();
  const Model g = grad(loss)(model, batch());
  const Model t = optim::gradient_template(model);
  CHECK(tree::structure(t) == tree::structure(g));
  CHECK(t.embed->weight.is_null());  // Frozen
  CHECK(t.embed->bias.is_null());
  CHECK(t.step.is_null());  // integer array
  CHECK((t.activation == model.activation));
  REQUIRE_FALSE(t.head.weight.is_null());
  CHECK(t.head.weight.shape() == Shape{3, 1});
  CHECK(t.head.weight.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(t.head.bias.to_vector<float>() == std::vector<float>{0});
}

TEST_CASE(
    "seed 2: state from the gradient template keeps one structure over three "
    "steps") {
  Model model = make_model();
  const Model original = model;
  const auto opt = optim::adam(0.05);
  optim::State state = opt.init(optim::gradient_template(model));
  const TreeDef structure = tree::structure(state);
  // The state holds moments only where gradients arrive (head), None elsewhere.
  const std::vector<Array>& mu = state.stages[0].leaves.at("mu");
  REQUIRE(mu.size() ==
          5);  // slots: embed.weight, embed.bias, head.weight, head.bias, step
  CHECK(mu[0].is_null());
  CHECK(mu[1].is_null());
  CHECK_FALSE(mu[2].is_null());
  CHECK_FALSE(mu[3].is_null());
  CHECK(mu[4].is_null());
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) {
    auto [value, g] = value_and_grad(loss)(model, batch());
    losses.push_back(value.item<float>());
    auto [updates, next] = opt.update(g, state, model);
    CHECK(updates.embed->weight.is_null());
    CHECK(updates.step.is_null());
    model = optim::apply_updates(model, updates);
    state = std::move(next);
    CHECK(tree::structure(state) == structure);
  }
  CHECK(state.stages[0].scalars.at("count").item<std::int32_t>() == 3);
  CHECK(losses[2] < losses[0]);
  CHECK(same_bits(model.embed->weight, original.embed->weight));
  CHECK(same_bits(model.embed->bias, original.embed->bias));
  CHECK(model.step.to_vector<std::int32_t>() == std::vector<std::int32_t>{7});
  CHECK_FALSE(same_bits(model.head.weight, original.head.weight));
}

TEST_CASE(
    "seed 2: a state initialised from the params is rejected, naming each "
    "differing path") {
  const Model model = make_model();
  const auto opt = optim::adam(0.05);
  const optim::State wrong = opt.init(model);  // arrays where grads have None
  const Model g = grad(loss)(model, batch());
  const std::string msg =
      error_text([&] { (void)opt.update(g, wrong, model); });
  CHECK(msg.starts_with(
      "[optim.update] the gradient tree does not have the structure the "
      "optimizer state was initialised with:\n"));
  CHECK(msg.find("  embed.value.weight: expected array, got None\n") !=
        std::string::npos);
  CHECK(msg.find("  embed.value.bias: expected array, got None\n") !=
        std::string::npos);
  CHECK(msg.find("  step: expected array, got None\n") != std::string::npos);
  CHECK(msg.find("head.") == std::string::npos);  // head matches: not listed
  CHECK(msg.find("optim::gradient_template(model)") != std::string::npos);
  CHECK_THROWS_AS((void)opt.update(g, wrong, model), TreeError);
}

TEST_CASE(
    "frozen leaves (by path and by path filter) stay bit for bit unchanged") {
  const Model original = make_model();
  for (const optim::Mask& mask :
       {optim::Mask::by_paths({"head.bias"}),
        optim::Mask::by_path_filter(ends_with_bias)}) {
    Model model = original;
    const auto opt = optim::chain(optim::frozen(mask), optim::adam(0.1));
    optim::State state = opt.init(optim::gradient_template(model));
    // adam after the freeze keeps no moments for the frozen leaf.
    CHECK(state.stages[1].leaves.at("mu")[3].is_null());
    for (int i = 0; i < 3; ++i) {
      const Model g = grad(loss)(model, batch());
      CHECK_FALSE(g.head.bias.is_null());  // it has a gradient ...
      auto [updates, next] = opt.update(g, state, model);
      CHECK(updates.head.bias.is_null());  // ... that the optimizer drops
      model = optim::apply_updates(model, updates);
      state = std::move(next);
    }
    CHECK(same_bits(model.head.bias, original.head.bias));
    CHECK(std::signbit(model.head.bias.to_vector<float>()[0]));  // still -0.0
    CHECK_FALSE(same_bits(model.head.weight, original.head.weight));
  }
}

TEST_CASE(
    "masked applies the inner transformation only where the mask matches") {
  Model model = make_model();
  const Model g = grad(loss)(model, batch());
  const auto opt =
      optim::masked(optim::sgd(2.0), optim::Mask::by_filter(is_matrix));
  optim::State state = opt.init(optim::gradient_template(model));
  auto [updates, next] = opt.update(g, state);
  CHECK(same_bits(updates.head.weight, g.head.weight * -2.0f));
  CHECK(same_bits(updates.head.bias, g.head.bias));  // passed through unchanged
  // The inverted mask does the opposite.
  const auto inv =
      optim::masked(optim::sgd(2.0), !optim::Mask::by_filter(is_matrix));
  auto [u2, s2] = inv.update(g, inv.init(optim::gradient_template(model)));
  CHECK(same_bits(u2.head.weight, g.head.weight));
  CHECK(same_bits(u2.head.bias, g.head.bias * -2.0f));
}

TEST_CASE(
    "an optimizer is a static value: equal configurations hash and compare "
    "equal") {
  static_assert(StaticLeaf<optim::GradientTransformation>);
  const auto a =
      optim::chain(optim::clip_by_global_norm(1.0), optim::adamw(1e-3));
  const auto b =
      optim::chain(optim::clip_by_global_norm(1.0), optim::adamw(1e-3));
  const auto c =
      optim::chain(optim::clip_by_global_norm(1.0), optim::adamw(1e-4));
  CHECK(a == b);
  CHECK(absl::Hash<optim::GradientTransformation>{}(a) ==
        absl::Hash<optim::GradientTransformation>{}(b));
  CHECK_FALSE(a == c);
  CHECK_FALSE(optim::masked(optim::sgd(0.1), optim::Mask::by_paths({"w"})) ==
              optim::masked(optim::sgd(0.1), optim::Mask::by_paths({"b"})));
  CHECK_FALSE(optim::frozen(optim::Mask::by_filter(is_matrix)) ==
              optim::frozen(optim::Mask::by_filter(is_inexact_array)));
  // As a static leaf of a tree (what a jit key holds): same structure for equal
  // optimizers, and a diff that names the change.
  CHECK(tree::structure(std::tuple{a}) == tree::structure(std::tuple{b}));
  const std::vector<tree::Difference> d = tree::diff(
      tree::structure(std::tuple{a}), tree::structure(std::tuple{c}));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "[0]");
  CHECK(d[0].kind == tree::DiffKind::kStaticValue);
  std::ostringstream os;
  os << a;
  CHECK(os.str() ==
        "chain(clip_by_global_norm(1), scale_by_adam(b1=0.9, b2=0.999, "
        "eps=1e-08, "
        "eps_root=0), add_decayed_weights(0.0001), "
        "scale_by_learning_rate(0.001))");
  std::ostringstream os2;
  os2 << optim::frozen(optim::Mask::by_filter(is_matrix));
  CHECK(os2.str() == "freeze() where (is_matrix)");
}

TEST_CASE(
    "the learning rate is a dynamic scalar in the state: set it without "
    "changing the structure") {
  const Model model = make_model();
  const Model g = grad(loss)(model, batch());
  const auto opt = optim::sgd(0.1);
  const optim::State state = opt.init(optim::gradient_template(model));
  CHECK(optim::learning_rate(state).item<float>() == 0.1f);
  const optim::State faster = optim::set_learning_rate(state, 0.5);
  CHECK(tree::structure(faster) == tree::structure(state));
  CHECK(optim::learning_rate(faster).item<float>() == 0.5f);
  CHECK(optim::learning_rate(state).item<float>() ==
        0.1f);  // the input is not changed
  auto [updates, next] = opt.update(g, faster);
  CHECK(same_bits(updates.head.weight, g.head.weight * -0.5f));
  const auto scheduled = optim::sgd(optim::linear_schedule(1.0, 0.0, 10));
  const std::string msg = error_text([&] {
    (void)optim::set_learning_rate(
        scheduled.init(optim::gradient_template(model)), 0.5);
  });
  CHECK(msg ==
        "[optim.set_learning_rate] this optimizer state has no constant "
        "learning rate "
        "(a schedule computes it from the step count)");
}

TEST_CASE("update errors name the stage, the path and what differs") {
  const Model model = make_model();
  const Model g = grad(loss)(model, batch());
  const Model tmpl = optim::gradient_template(model);

  SUBCASE("a mask path that names no slot") {
    const auto opt =
        optim::masked(optim::sgd(0.1), optim::Mask::by_paths({"head.weights"}));
    CHECK(error_text([&] { (void)opt.init(tmpl); }) ==
          "[optim.init] stage 0 (scale_by_learning_rate): the mask path "
          "'head.weights' names "
          "no array slot; the slots are: embed.value.weight, embed.value.bias, "
          "head.weight, "
          "head.bias, step");
  }
  SUBCASE("add_decayed_weights without params") {
    const auto opt = optim::adamw(0.1);
    CHECK(error_text([&] { (void)opt.update(g, opt.init(tmpl)); }) ==
          "[optim.update] stage 1 (add_decayed_weights) needs the parameters: "
          "call "
          "opt.update(grads, state, params)");
  }
  SUBCASE("a state made by another optimizer") {
    const optim::State sgd_state = optim::sgd(0.1, 0.9).init(tmpl);
    CHECK(error_text([&] { (void)optim::adam(0.1).update(g, sgd_state); }) ==
          "[optim.update] stage 0 of the state was made by trace but this "
          "optimizer's stage 0 "
          "is scale_by_adam; was the state made by another optimizer?");
    CHECK(error_text([&] { (void)optim::sgd(0.1).update(g, sgd_state); }) ==
          "[optim.update] the state has 2 stages but the optimizer has 1; was "
          "it made by this "
          "optimizer's init?");
  }
  SUBCASE("a gradient of another shape at the same structure") {
    const auto opt = optim::adam(0.1);
    const optim::State state = opt.init(tmpl);
    const Model bad = tree::tree_at(
        [](Model& m) -> Array& { return m.head.weight; }, g, zeros({1, 3}));
    const std::string msg = error_text([&] { (void)opt.update(bad, state); });
    CHECK(msg ==
          "[optim.update] stage 0 (scale_by_adam) at head.weight: the gradient "
          "is "
          "f32(1, 3) but the state's 'mu' is f32(3, 1)");
  }
  SUBCASE("params whose structure differs from the gradients") {
    const auto opt = optim::adamw(0.1);
    Model other = model;
    other.activation = relu;
    const std::string msg =
        error_text([&] { (void)opt.update(g, opt.init(tmpl), other); });
    CHECK(
        msg.starts_with("[optim.update] the params do not have the structure "
                        "of the gradients:\n"
                        "  activation: "));
  }
  SUBCASE("apply_updates with an update where the params have None") {
    Model params = model;
    params.head.bias = Array();
    const std::string msg =
        error_text([&] { (void)optim::apply_updates(params, g); });
    CHECK(msg ==
          "[optim.apply_updates] the updates do not have the structure of the "
          "params:\n"
          "  head.bias: expected None, got array\n(expected = params, got = "
          "updates)");
  }
}

TEST_CASE("apply_updates adds where updates hold arrays and skips None") {
  const Model model = make_model();
  Model updates = optim::gradient_template(model);
  updates.head.weight = ones({3, 1});
  updates.head.bias = Array();
  const Model out = optim::apply_updates(model, updates);
  CHECK(out.head.weight.to_vector<float>() ==
        std::vector<float>{2.0f, 0.0f, 1.5f});
  CHECK(out.head.bias.same(model.head.bias));
}

TEST_CASE(
    "update works for several structures in turn (the check cache is keyed per "
    "structure)") {
  struct Small {
    Array w;
    KILN_MODULE(Small, w);
  };
  const Small s{array<float>({1.0f, 2.0f})};
  const Model model = make_model();
  const auto opt = optim::sgd(1.0);
  const optim::State small_state = opt.init(optim::gradient_template(s));
  const optim::State model_state = opt.init(optim::gradient_template(model));
  for (int i = 0; i < 2; ++i) {
    CHECK(opt.update(s, small_state).first.w.to_vector<float>() ==
          std::vector<float>{-1, -2});
    CHECK_NOTHROW((void)opt.update(grad(loss)(model, batch()), model_state));
    CHECK_THROWS_AS((void)opt.update(s, model_state), TreeError);
  }
}

TEST_CASE(
    "the optimizer state is a pytree with readable paths that rebuilds from "
    "its leaves") {
  const Model model = make_model();
  const auto opt = optim::adam(0.1);
  const optim::State state = opt.init(optim::gradient_template(model));
  const tree::Flat flat = tree::flatten(state);
  CHECK(tree::paths(flat.def) ==
        std::vector<std::string>{
            R"(stages[0].leaves["mu"][2])", R"(stages[0].leaves["mu"][3])",
            R"(stages[0].leaves["nu"][2])", R"(stages[0].leaves["nu"][3])",
            R"(stages[0].scalars["count"])",
            R"(stages[1].scalars["learning_rate"])"});
  CHECK(flat.leaves[4].dtype() == i32);
  CHECK(flat.leaves[4].ndim() == 0);
  CHECK(flat.leaves[5].dtype() == f32);
  const optim::State rebuilt =
      tree::unflatten<optim::State>(flat.def, flat.leaves);
  CHECK(rebuilt.gradient_structure == state.gradient_structure);
  CHECK(rebuilt.stages[0].kind == "scale_by_adam");
  const Model g = grad(loss)(model, batch());
  CHECK(same_bits(opt.update(g, rebuilt).first.head.weight,
                  opt.update(g, state).first.head.weight));
}

TEST_CASE(
    "update is traceable: grad differentiates through an optimizer step") {
  struct Small {
    Array w;
    KILN_MODULE(Small, w);
  };
  const Small p{array<float>({1.0f, -2.0f, 3.0f})};
  // sgd with momentum, gradient = w: w' = w - 0.1 * (w + 0.9 * 0) = 0.9 w, so
  // d/dw sum(w'^2) = 1.62 w.
  const auto opt = optim::sgd(0.1, 0.9);
  const optim::State state = opt.init(optim::gradient_template(p));
  auto f = [&](const Small& s) {
    const Small next = optim::apply_updates(s, opt.update(s, state).first);
    return sum(next.w * next.w);
  };
  const std::vector<float> g = grad(f)(p).w.to_vector<float>();
  REQUIRE(g.size() == 3);
  CHECK(g[0] == doctest::Approx(1.62).epsilon(1e-6));
  CHECK(g[1] == doctest::Approx(-3.24).epsilon(1e-6));
  CHECK(g[2] == doctest::Approx(4.86).epsilon(1e-6));
}

TEST_CASE("global_norm: the norm clip_by_global_norm compares, observable in a step (issue 37)") {
  const Layer g{array<float>({3.0f, 0.0f, -4.0f}, {3, 1}), array<float>({12.0f})};
  CHECK(optim::global_norm(g).item<float>() == 13.0f);  // sqrt(9 + 16 + 144)
  CHECK(optim::global_norm(std::vector<Array>{}).item<float>() == 0.0f);
  // Inside a compiled step, beside the clipped update: the clip scales by
  // max_norm / global_norm exactly when global_norm exceeds max_norm.
  const auto opt = optim::clip_by_global_norm(6.5);
  const optim::State state = opt.init(optim::gradient_template(g));
  const auto step = filter_jit([&](const Layer& grads, const optim::State& s) {
    auto [updates, next] = opt.update(grads, s);
    return std::make_pair(updates, optim::global_norm(grads));
  });
  auto [updates, norm] = step(g, state);
  CHECK(norm.item<float>() == 13.0f);
  CHECK(same_bits(updates.bias, array<float>({12.0f}) / 13.0f * 6.5f));
}
