// A tour of what kiln does today: eager ops on the default device, broadcasting,
// reductions, matmul, pytrees (typed modules with paths, structure and static
// leaves with a stable identity), value_and_grad over a module, the traced
// program of a function, and dtype rules with their errors.
#include <iostream>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>

using namespace kiln;

struct Linear {
  Array weight;
  Array bias;  // may be None
  KILN_MODULE(Linear, weight, bias);
};

struct MLP {
  std::vector<Linear> layers;
  Array (*activation)(const Array&) = relu;  // static leaf: compared by identity
  KILN_MODULE(MLP, layers, activation);

  Array operator()(Array x) const {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      x = matmul(x, layers[i].weight);
      if (!layers[i].bias.is_null()) x = x + layers[i].bias;
      if (i + 1 < layers.size()) x = activation(x);
    }
    return x;
  }
};

MLP make_mlp() {
  return MLP{{{full({3, 4}, 0.5), zeros({4})}, {full({4, 2}, 0.25), Array()}},
             relu};
}

int main() {
  std::cout << "kiln tour on device " << default_device() << "\n\n";

  Array x = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::cout << "x =\n" << x << "\n";
  Array y = relu(x - 2.0f) * 10.0f + array<float>({1, 2, 3});
  std::cout << "relu(x - 2) * 10 + [1, 2, 3] =\n" << y << "\n";
  std::cout << "sum over axis 1: " << sum(y, 1) << "\n";
  std::cout << "argmax over axis 1: " << argmax(y, 1) << "\n";
  std::cout << "mean (keepdims): " << mean(x, {0, 1}, true) << "\n\n";

  MLP model = make_mlp();
  std::cout << "model(x) =\n" << model(x) << "\n\n";

  std::cout << "model leaves by path:\n";
  auto [leaves, def] = tree::flatten(model);
  auto paths = tree::paths(model);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    std::cout << "  " << paths[i] << ": " << leaves[i].dtype() << " "
              << to_string(leaves[i].shape()) << "\n";
  }
  std::cout << "structure: " << to_string(def) << "\n";
  std::cout << "a rebuilt model has the same structure: "
            << (tree::structure(make_mlp()) == def ? "yes" : "no") << "\n";

  MLP other = make_mlp();
  other.activation = tanh;
  other.layers.pop_back();
  std::cout << "differences against a changed model:\n"
            << tree::format_diff(tree::diff(def, tree::structure(other))) << "\n";

  std::cout << "gradients have the model's structure (None where no gradient):\n";
  auto loss = [](const MLP& m, const Array& in) {
    Array out = m(in);
    return mean(out * out);
  };
  auto [value, grads] = value_and_grad(loss)(model, x);
  std::cout << "  loss = " << value.item<float>() << "\n";
  std::cout << "  grad structure: " << to_string(tree::structure(grads)) << "\n";
  std::cout << "  d loss / d layers[1].weight =\n" << grads.layers[1].weight << "\n\n";

  std::cout << "a jitted adam step, state built from the gradient template:\n";
  {
    const auto opt = optim::adam(0.05);
    optim::State state = opt.init(optim::gradient_template(model));
    auto step = filter_jit(
        [opt, loss](const MLP& m, const optim::State& s, const Array& in) {
          auto [l, g] = value_and_grad(loss)(m, in);
          auto [updates, next] = opt.update(g, s, m);
          return std::tuple{optim::apply_updates(m, updates), next, l};
        },
        {.name = "train_step", .arg_names = {"model", "state", "x"}});
    MLP trained = model;
    for (int i = 0; i < 3; ++i) {
      Array l;
      // std::move donates the old parameters and state: updated in place.
      std::tie(trained, state, l) = step(std::move(trained), std::move(state), x);
      std::cout << "  step " << i << ": loss = " << l.item<float>() << "\n";
    }
    std::cout << "  traces: " << step.trace_count() << " (" << step.last_retrace()
              << "), launches per step: " << step.last_run().launches << "\n";
    std::cout << "  optimizer: " << opt << "\n";
    step(trained, state, ones({4, 3}));  // a new batch size: one retrace, explained
    std::cout << "  " << step.last_retrace() << "\n\n";
  }

  std::cout << "the traced program of the loss:\n";
  {
    Trace trace;
    Array xt = trace.input(x.aval(), x.device(), "x");
    Array out = loss(model, xt);
    Program program = trace.finish(std::span<const Array>(&out, 1));
    optimize(program);
    std::cout << to_string(program) << "\n\n";
  }

  std::cout << "dtype rules are explicit:\n";
  try {
    Array bad = x + arange(3.0);  // f32 + i32
  } catch (const Error& e) {
    std::cout << "  " << e.what() << "\n";
  }
  try {
    Array bad = matmul(x, x);
  } catch (const Error& e) {
    std::cout << "  " << e.what() << "\n";
  }
  return 0;
}
