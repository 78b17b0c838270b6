// Reverse-mode evaluation of a traced program.
#include "kiln/dsl/autodiff.hpp"

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/control_run.hpp"
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

void check_transform_output(std::string_view op, const Array& out) {
  if (out.is_null()) throw ValueError(str_cat("[", op, "] the function returned None"));
  if (!is_inexact(out.dtype())) {
    throw DTypeError(str_cat("[", op, "] the function must return floating arrays, got ",
                             name(out.dtype()), to_string(out.shape())));
  }
}

void throw_tangent_mismatch(std::size_t got, std::size_t want) {
  throw TreeError(str_cat("[jvp] the tangent has ", got, " arrays but x has ", want,
                          "; pass a tangent with x's structure"));
}

Array one_hot_row(std::int64_t i, std::int64_t n, DType dtype, Device device) {
  return astype(arange(0, static_cast<double>(n), 1, DType::kI32, device) ==
                    full({}, static_cast<double>(i), DType::kI32, device),
                dtype);
}

std::vector<Array> pull_back(const Program& p, std::span<const Array> env,
                             std::span<const Array> output_cts) {
  std::vector<Array> ct(p.num_values());
  auto add = [&](ValueId v, const Array& c) {
    if (c.is_null() || !is_inexact(p.avals[v].dtype)) return;
    ct[v] = ct[v].is_null() ? c : ct[v] + c;
  };
  for (std::size_t i = 0; i < p.outputs.size() && i < output_cts.size(); ++i) {
    add(p.outputs[i], output_cts[i]);
  }
  absl::InlinedVector<Array, 3> args;
  std::vector<Array> outs, out_ct;
  for (auto it = p.equations.rbegin(); it != p.equations.rend(); ++it) {
    args.clear();
    std::vector<Array> in_ct;
    if (family(it->prim) == PrimFamily::kControl) {
      outs.clear();
      out_ct.clear();
      bool any = false;
      for (ValueId v : outputs_of(*it)) {
        outs.push_back(env[v]);
        out_ct.push_back(ct[v]);
        any = any || !ct[v].is_null();
      }
      if (!any) continue;
      for (ValueId in : it->inputs) args.push_back(env[in]);
      in_ct = control_vjp(*it, args, outs, out_ct);
    } else {
      const Array& g = ct[it->output];
      if (g.is_null() || !is_inexact(p.avals[it->output].dtype)) continue;
      for (ValueId in : it->inputs) args.push_back(env[in]);
      in_ct = detail::vjp(*it, args, env[it->output], g);
    }
    for (std::size_t i = 0; i < it->inputs.size(); ++i) add(it->inputs[i], in_ct[i]);
  }
  std::vector<Array> grads;
  grads.reserve(p.inputs.size());
  for (ValueId v : p.inputs) grads.push_back(ct[v].is_null() ? zeros_like(env[v]) : ct[v]);
  return grads;
}

std::vector<Array> pull_back_program(const Program& p, std::span<const Array> inputs,
                                     std::span<const Array> output_cts) {
  const Program q = with_residuals(p);
  const std::vector<Array> env = eval_all(q, inputs);
  return pull_back(q, env, output_cts);
}

std::pair<std::vector<Array>, std::vector<Array>> value_and_grad_program(
    const Program& p, std::span<const Array> inputs) {
  const Program q = with_residuals(p);
  const std::vector<Array> env = eval_all(q, inputs);
  std::vector<Array> out_ct(q.outputs.size());
  out_ct[0] = ones_like(env[q.outputs.front()]);
  std::vector<Array> grads = pull_back(q, env, out_ct);
  std::vector<Array> outs;
  for (ValueId v : q.outputs) outs.push_back(env[v]);
  return {std::move(outs), std::move(grads)};
}

}  // namespace detail
}  // namespace kiln
