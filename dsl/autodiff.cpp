// Reverse-mode evaluation of a traced program.
#include "kiln/dsl/autodiff.hpp"

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/vjp.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Array stop_gradient(const Array& a) {
  detail::check_not_none("stop_gradient", a, "argument");
  return detail::bind<Prim::kStopGradient>({}, {&a, 1}, a.aval());
}

namespace detail {

std::vector<bool> differentiable_leaves(const TreeDef& def, std::span<const Array> leaves) {
  std::vector<bool> out = tree::frozen_leaves(def);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = !out[i] && is_inexact(leaves[i].dtype());
  }
  return out;
}

void check_grad_output(const Array& out) {
  if (out.is_null()) throw ValueError("[grad] the function returned None");
  if (out.size() != 1 || out.ndim() != 0) {
    throw ShapeError(str_cat("[grad] the function must return a scalar (shape ()), got shape ",
                             to_string(out.shape()),
                             "; reduce it first (e.g. sum or mean)"));
  }
  if (!is_inexact(out.dtype())) {
    throw DTypeError(str_cat("[grad] the function must return a floating scalar, got dtype ",
                             name(out.dtype())));
  }
}

void throw_nothing_to_differentiate(const TreeDef& def, std::span<const Array> leaves) {
  std::vector<std::string> found;
  const std::vector<std::string> paths = tree::paths(def);
  for (std::size_t i = 0; i < leaves.size() && i < 4; ++i) {
    found.push_back(str_cat(paths[i].empty() ? "<root>" : paths[i], ": ",
                            name(leaves[i].dtype()), to_string(leaves[i].shape())));
  }
  if (leaves.size() > 4) found.push_back("...");
  throw DTypeError(str_cat(
      "[grad] the first argument has no floating array to differentiate (outside Frozen)",
      found.empty() ? std::string(": it holds no arrays") : ": found " + join(found, ", "),
      "; grad differentiates the floating leaves of its first argument"));
}

std::pair<std::vector<Array>, std::vector<Array>> value_and_grad_program(
    const Program& p, std::span<const Array> inputs) {
  std::vector<Array> env = eval_all(p, inputs);
  std::vector<Array> ct(p.num_values());
  const ValueId loss = p.outputs.front();
  ct[loss] = ones_like(env[loss]);
  absl::InlinedVector<Array, 3> args;
  for (auto it = p.equations.rbegin(); it != p.equations.rend(); ++it) {
    const Array& g = ct[it->output];
    if (g.is_null() || !is_inexact(p.avals[it->output].dtype)) continue;
    args.clear();
    for (ValueId in : it->inputs) args.push_back(env[in]);
    std::vector<Array> in_ct = vjp(*it, args, env[it->output], g);
    for (std::size_t i = 0; i < it->inputs.size(); ++i) {
      const ValueId v = it->inputs[i];
      if (in_ct[i].is_null() || !is_inexact(p.avals[v].dtype)) continue;
      ct[v] = ct[v].is_null() ? in_ct[i] : ct[v] + in_ct[i];
    }
  }
  std::vector<Array> outs, grads;
  for (ValueId v : p.outputs) outs.push_back(env[v]);
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    const ValueId v = p.inputs[i];
    grads.push_back(ct[v].is_null() ? zeros_like(inputs[i]) : ct[v]);
  }
  return {std::move(outs), std::move(grads)};
}

}  // namespace detail
}  // namespace kiln
