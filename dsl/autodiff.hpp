// grad and value_and_grad over pytrees. They differentiate with respect to the
// inexact (floating) array leaves of the first argument; the gradient has the
// first argument's tree structure with None at every other leaf (integer and bool
// arrays, None, and arrays inside a kiln::Frozen subtree); kiln::stop_gradient
// blocks gradients flowing through a value. The function is traced
// into a Program, evaluated, and the vjp rules run backwards; all of it goes
// through the DSL, so it works eagerly and inside an enclosing trace (grad of grad).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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
    Trace trace;
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

// value_and_grad(f)(x, rest...) -> (f(x, rest...), df/dx). f returns a scalar
// floating Array, or (has_aux) a pytree whose first leaf is that scalar: then
// the value is the whole pytree (loss and auxiliary outputs).
template <class F>
auto value_and_grad(F f) {
  return [f = std::move(f)](const auto& x, const auto&... rest) mutable {
    return detail::trace_and_differentiate(f, x, rest...);
  };
}

// grad(f)(x, rest...) -> df/dx, with x's tree structure (None where no gradient).
template <class F>
auto grad(F f) {
  return [f = std::move(f)](const auto& x, const auto&... rest) mutable {
    return detail::trace_and_differentiate(f, x, rest...).second;
  };
}

}  // namespace kiln
