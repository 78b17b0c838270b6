// grad and value_and_grad over pytrees. They differentiate with respect to the
// inexact (floating) array leaves of the first argument; the gradient has the
// first argument's tree structure with None at every other leaf (integer and bool
// arrays, None, and arrays inside a kiln::Frozen subtree); kiln::stop_gradient
// blocks gradients flowing through a value. The function is traced
// into a Program, evaluated, and the vjp rules run backwards; all of it goes
// through the DSL, so it works eagerly and inside an enclosing trace (grad of grad).
#pragma once

#include <concepts>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/callable.hpp"
#include "kiln/dsl/program.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln {

// Identity whose gradient is zero (no gradient flows into `a`).
Array stop_gradient(const Array& a);

namespace detail {

// Evaluates `p` (a scalar first output) at `inputs` and pulls back a cotangent of
// 1 through it. Returns the outputs and one gradient per input (zeros where the
// output does not depend on the input).
std::pair<std::vector<Array>, std::vector<Array>> value_and_grad_program(
    const Program& p, std::span<const Array> inputs);

// For each array leaf of a flattened first argument, whether grad differentiates
// it: a floating array outside every kiln::Frozen subtree. The one statement of
// that rule (optim::gradient_template reuses it).
std::vector<bool> differentiable_leaves(const TreeDef& def, std::span<const Array> leaves);

// The cotangents of p's inputs (zeros where none flows), given every value of
// an evaluation of p (env, from eval_all) and cotangents of its outputs (null:
// zero). Runs the rules backwards through the DSL.
std::vector<Array> pull_back(const Program& p, std::span<const Array> env,
                             std::span<const Array> output_cts);
// Evaluates p at `inputs` and pulls `output_cts` back to them.
std::vector<Array> pull_back_program(const Program& p, std::span<const Array> inputs,
                                     std::span<const Array> output_cts);

// Checks what a differentiated function returned: a scalar floating array.
void check_grad_output(const Array& out);
// The first argument has no floating array outside Frozen: grad would be all None.
[[noreturn]] void throw_nothing_to_differentiate(const TreeDef& def,
                                                 std::span<const Array> leaves);

// The common part of grad/value_and_grad: traces f at x (differentiating x's
// inexact leaves) and returns (outputs of f as arrays, gradient tree).
template <class F, class T, class... Rest>
auto trace_and_differentiate(F& f, const T& x, const Rest&... rest) {
  tree::Flat flat = tree::flatten(x);
  const std::vector<std::string> names = tree::paths(flat.def);
  const std::vector<bool> differentiable = differentiable_leaves(flat.def, flat.leaves);
  using Result = std::invoke_result_t<F&, const T&, const Rest&...>;
  Program program;
  Result result_shape{};
  std::vector<std::size_t> diff;  // indices of differentiated leaves
  {
    Trace trace("grad");
    std::vector<Array> traced = flat.leaves;
    for (std::size_t i = 0; i < traced.size(); ++i) {
      if (!differentiable[i]) continue;
      diff.push_back(i);
      traced[i] = trace.input(traced[i].aval(), traced[i].device(), names[i]);
    }
    if (diff.empty()) throw_nothing_to_differentiate(flat.def, flat.leaves);
    const T xt = tree::unflatten<T>(flat.def, traced);
    result_shape = f(xt, rest...);
    std::vector<Array> outs = tree::leaves(result_shape);
    if (outs.empty()) throw ValueError("[grad] the function returned no array");
    check_grad_output(outs.front());
    program = trace.finish(outs);
  }
  eliminate_dead_code(program);
  std::vector<Array> inputs;
  for (std::size_t i : diff) inputs.push_back(flat.leaves[i]);
  auto [values, grads] = value_and_grad_program(program, inputs);
  std::vector<Array> leaf_grads(flat.leaves.size());
  for (std::size_t k = 0; k < diff.size(); ++k) leaf_grads[diff[k]] = grads[k];
  std::size_t next = 0;
  T grad_tree = tree::map([&](const Array&) { return leaf_grads[next++]; }, x);
  Result value = tree::unflatten<Result>(tree::structure(result_shape), values);
  return std::pair{std::move(value), std::move(grad_tree)};
}

}  // namespace detail

namespace detail {

// Each result leaf of vjp/jvp is a floating array.
void check_transform_output(std::string_view op, const Array& out);
[[noreturn]] void throw_tangent_mismatch(std::size_t got, std::size_t want);
// Row i of the n x n identity, as a vector (for jacrev/jacfwd).
Array one_hot_row(std::int64_t i, std::int64_t n, DType dtype, Device device);
// The program autodiff evaluates in place of `p`: every scan also returns its
// carries per iteration (save_carries), which the reverse pass reads.
Program with_residuals(const Program& p);

// f traced at x (its inexact leaves outside Frozen are the program's inputs),
// for the transforms below that take any result, not only a scalar.
template <class R>
struct TracedAt {
  Program program;
  std::vector<Array> inputs;        // the differentiated leaves' values
  std::vector<std::size_t> diff;    // their indices among x's leaves
  std::size_t num_leaves = 0;       // x's leaves
  TreeDef result;                   // the structure of f's result
};
template <class F, class T, class... Rest>
auto trace_at(std::string_view op, F& f, const T& x, const Rest&... rest) {
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const T&, const Rest&...>>;
  tree::Flat flat = tree::flatten(x);
  const std::vector<std::string> names = tree::paths(flat.def);
  const std::vector<bool> differentiable = differentiable_leaves(flat.def, flat.leaves);
  TracedAt<R> out;
  out.num_leaves = flat.leaves.size();
  {
    Trace trace(op);
    std::vector<Array> traced = flat.leaves;
    for (std::size_t i = 0; i < traced.size(); ++i) {
      if (!differentiable[i]) continue;
      out.diff.push_back(i);
      out.inputs.push_back(flat.leaves[i]);
      traced[i] = trace.input(traced[i].aval(), traced[i].device(), names[i]);
    }
    if (out.diff.empty()) throw_nothing_to_differentiate(flat.def, flat.leaves);
    tree::Flat res = tree::flatten(R(f(tree::unflatten<T>(flat.def, traced), rest...)));
    for (const Array& o : res.leaves) check_transform_output(op, o);
    out.result = std::move(res.def);
    out.program = trace.finish(res.leaves);
  }
  eliminate_dead_code(out.program);
  return out;
}

}  // namespace detail

// value_and_grad(f)(x, rest...) -> (f(x, rest...), df/dx). f returns a scalar
// floating Array, or (has_aux) a pytree whose first leaf is that scalar: then
// the value is the whole pytree (loss and auxiliary outputs).
template <class F>
auto value_and_grad(F f) {
  return [f = detail::Held<F>{std::move(f)}](const auto& x, const auto&... rest) {
    return detail::trace_and_differentiate(f, x, rest...);
  };
}

// grad(f)(x, rest...) -> df/dx, with x's tree structure (None where no gradient).
template <class F>
auto grad(F f) {
  return [f = detail::Held<F>{std::move(f)}](const auto& x, const auto&... rest) {
    return detail::trace_and_differentiate(f, x, rest...).second;
  };
}

// vjp(f, x, rest...) -> (f(x, rest...), pullback): pullback(ct), with ct of f's
// result type (None/null leaves: zero), returns the cotangent for x: x's type,
// None where grad would give None. The forward pass runs once; pullback may be
// called any number of times (inside the trace vjp was called in, if any).
template <class F, class T, class... Rest>
  requires std::invocable<F&, const T&, const Rest&...>
auto vjp(F f, const T& x, const Rest&... rest) {
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const T&, const Rest&...>>;
  auto traced = std::make_shared<detail::TracedAt<R>>(detail::trace_at("vjp", f, x, rest...));
  traced->program = detail::with_residuals(traced->program);
  auto env = std::make_shared<const std::vector<Array>>(eval_all(traced->program, traced->inputs));
  std::vector<Array> outs;
  for (ValueId v : traced->program.outputs) outs.push_back((*env)[v]);
  R value = tree::unflatten<R>(traced->result, outs);
  auto pullback = [traced, env, x](const R& ct) {
    tree::Flat c = tree::flatten(ct);
    const std::vector<Array> slots = detail::expand_slots(c.def, c.leaves);
    const std::vector<Array> g = detail::pull_back(traced->program, *env, slots);
    std::vector<Array> leaf_grads(traced->num_leaves);
    for (std::size_t k = 0; k < traced->diff.size(); ++k) leaf_grads[traced->diff[k]] = g[k];
    std::size_t next = 0;
    return tree::map([&](const Array&) { return leaf_grads[next++]; }, x);
  };
  return std::pair{std::move(value), std::move(pullback)};
}

// jvp(f, x, t, rest...) -> (f(x, rest...), J t): the directional derivative
// along t (x's structure; its differentiated leaves are used). Forward mode
// by transposing the reverse pass: u -> <pullback(u), t> is linear in u, and
// its gradient is J t, so every primitive's vjp rule serves (grad of grad
// runs through the same rules). Costs about two reverse passes.
template <class F, class T, class... Rest>
  requires std::invocable<F&, const T&, const Rest&...>
auto jvp(F f, const T& x, const T& t, const Rest&... rest) {
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const T&, const Rest&...>>;
  const detail::TracedAt<R> traced = detail::trace_at("jvp", f, x, rest...);
  const std::vector<Array> t_leaves = tree::leaves(t);
  if (t_leaves.size() != traced.num_leaves) detail::throw_tangent_mismatch(t_leaves.size(), traced.num_leaves);
  std::vector<Array> tangents;
  for (std::size_t i : traced.diff) tangents.push_back(t_leaves[i]);
  const std::vector<Array> outs = eval(traced.program, traced.inputs);
  std::vector<Array> dual;
  for (const Array& o : outs) dual.push_back(zeros_like(o));
  const std::vector<Array> jt = grad([&](const std::vector<Array>& u) {
    const std::vector<Array> g = detail::pull_back_program(traced.program, traced.inputs, u);
    Array total;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Array s = sum(g[i] * tangents[i]);
      total = total.is_null() ? s : total + s;
    }
    return total;
  })(dual);
  return std::pair{tree::unflatten<R>(traced.result, outs), tree::unflatten<R>(traced.result, jt)};
}

// jacrev(f)(x) / jacfwd(f)(x) for an array function of one array: the
// Jacobian, shape f(x).shape + x.shape (one pullback per output element, or
// one jvp per input element). hessian(f)(x) = jacfwd(grad(f))(x).
template <class F>
auto jacrev(F f) {
  return [f = detail::Held<F>{std::move(f)}](const Array& x) {
    auto [y, pullback] = vjp(f, x);
    const std::int64_t n = y.size();
    std::vector<Array> rows;
    for (std::int64_t i = 0; i < n; ++i) {
      rows.push_back(pullback(reshape(detail::one_hot_row(i, n, y.dtype(), y.device()), y.shape())));
    }
    Shape shape = y.shape();
    shape.insert(shape.end(), x.shape().begin(), x.shape().end());
    return n == 0 ? zeros(shape, x.dtype(), x.device()) : reshape(stack(rows), shape);
  };
}
template <class F>
auto jacfwd(F f) {
  return [f = detail::Held<F>{std::move(f)}](const Array& x) {
    const std::int64_t n = x.size();
    std::vector<Array> cols;
    Array y;
    for (std::int64_t j = 0; j < n; ++j) {
      auto [value, tangent] = jvp(f, x, reshape(detail::one_hot_row(j, n, x.dtype(), x.device()), x.shape()));
      y = value;
      cols.push_back(reshape(tangent, {tangent.size()}));
    }
    if (y.is_null()) y = f(x);
    Shape shape = y.shape();
    shape.insert(shape.end(), x.shape().begin(), x.shape().end());
    if (n == 0) return zeros(shape, y.dtype(), y.device());
    return reshape(transpose(stack(cols)), shape);  // (n_x, n_y) -> (n_y, n_x)
  };
}
template <class F>
auto hessian(F f) {
  return jacfwd(grad(std::move(f)));
}

}  // namespace kiln
