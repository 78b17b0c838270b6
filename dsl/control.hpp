// Control flow as program constructs: scan, fori_loop, while_loop, cond,
// switch_case, and the call-like transforms checkpoint (remat) and custom_vjp.
// Semantics follow JAX's lax.scan / lax.while_loop / lax.cond / lax.switch /
// jax.checkpoint / jax.custom_vjp.
//
// Each body is traced once into a sub-program (on tracers of its inputs'
// avals), whatever the trip count, and bound as one equation of a kControl
// primitive (dsl/primitives.inc) holding the sub-programs in its parameters.
// Arrays a body uses from outside become explicit inputs of that equation
// (tracers of an enclosing trace) or constants of the sub-program (concrete
// arrays). Outside a trace the equation runs at once, the bodies evaluated op
// by op; inside filter_jit it is one step of the compiled program, each body an
// Executable of its own (dsl/executable.hpp).
//
// Carries are pytrees; the body must return the carry with the structure and
// avals it was given (a ShapeError/TreeError naming the path otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "kiln/dsl/callable.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/program.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln {

namespace detail {

// A body as a flat function: one tracer per input leaf in, result leaves out.
using FlatBody = absl::FunctionRef<std::vector<Array>(std::span<const Array>)>;

// A traced body: `program` takes the outer tracers it used (`hoisted`, in
// that order) first, then the declared inputs.
struct ClosedBody {
  ProgramRef program;
  std::vector<Array> hoisted;
};
ClosedBody trace_body(std::string_view op, FlatBody f, std::span<const Aval> in, Device device,
                      std::span<const std::string> names);

// "[op] path what" (the error prefix of this file).
std::string str_cat_path(std::string_view op, std::string_view path, std::string_view what);
// Checks that a body returned `what` (its carry, a branch's result) with the
// structure and avals `in_def`/`in_avals` (a TreeError / ShapeError naming
// `op`, `what` and the leaf's path). With `allow_none`, None may stand for an
// array (a zero cotangent); the caller fills those slots.
void check_carry(std::string_view op, std::string_view what, const TreeDef& in_def,
                 std::span<const Aval> in_avals, const TreeDef& out_def, std::span<const Array> out,
                 bool allow_none = false);
// custom_vjp's cotangents: one per array leaf of `def`, zeros where `got`
// (same structure, None allowed) has None.
std::vector<Array> fill_cotangents(std::string_view op, const TreeDef& def,
                                   std::span<const Aval> avals, Device device,
                                   const TreeDef& got_def, std::span<const Array> got);
std::vector<Aval> avals_of(std::span<const Array> leaves, std::string_view op,
                           std::span<const std::string> paths);
// The device of the first array among `groups` (the default device if none).
Device device_of(std::span<const Array> a, std::span<const Array> b = {});
// The scan length: `length` if given, else the leading extent shared by the xs.
std::int64_t scan_length(std::optional<std::int64_t> length, std::span<const Array> xs,
                         std::span<const std::string> paths);
std::vector<std::string> prefixed(std::string_view prefix, const TreeDef& def);

// The flat forms the templates below bind.
std::vector<Array> scan_flat(const ClosedBody& body, std::span<const Array> init,
                             std::span<const Array> xs, std::int64_t length, bool reverse);
std::vector<Array> while_flat(const ClosedBody& cond, const ClosedBody& body,
                              std::span<const Array> init);
std::vector<Array> switch_flat(const Array& index, std::span<const ClosedBody> branches,
                               std::span<const Array> operands);
std::vector<Array> call_flat(const ClosedBody& body, std::string_view name, bool remat,
                             std::span<const Array> inputs);
std::vector<Array> custom_vjp_flat(const ClosedBody& primal, const ClosedBody& fwd,
                                   const ClosedBody& bwd, std::string_view name,
                                   std::size_t num_residuals, std::span<const Array> inputs);

// The array leaves of `value` (and its structure in *def).
template <class T>
std::vector<Array> flat_leaves(const T& value, TreeDef* def) {
  tree::Flat f = tree::flatten(value);
  if (def != nullptr) *def = std::move(f.def);
  return std::move(f.leaves);
}

}  // namespace detail

// scan(f, init, xs, length, reverse) -> (final carry, ys). f(carry, x) returns
// std::pair{new carry, y}; x is xs with the leading axis indexed (xs may be any
// pytree, e.g. std::tuple<>{} with `length` given), and the y of every
// iteration is stacked along a new leading axis. With `reverse`, iterations run
// from the last index to the first (ys stay indexed by position).
template <class F, class Carry, class Xs>
auto scan(F&& f, const Carry& init, const Xs& xs, std::optional<std::int64_t> length = std::nullopt,
          bool reverse = false) {
  using R = std::invoke_result_t<F&, const Carry&, const Xs&>;
  using Y = std::remove_cvref_t<std::tuple_element_t<1, R>>;
  TreeDef carry_def, xs_def;
  const std::vector<Array> init_leaves = detail::flat_leaves(init, &carry_def);
  const std::vector<Array> xs_leaves = detail::flat_leaves(xs, &xs_def);
  std::vector<std::string> names = detail::prefixed("carry", carry_def);
  const std::vector<std::string> x_names = detail::prefixed("x", xs_def);
  const std::int64_t n = detail::scan_length(length, xs_leaves, detail::prefixed("xs", xs_def));
  std::vector<Aval> in = detail::avals_of(init_leaves, "scan", names);
  const std::size_t nc = in.size();
  for (const Array& x : xs_leaves) {
    in.push_back(Aval{x.dtype(), Shape(x.shape().begin() + 1, x.shape().end())});
  }
  names.insert(names.end(), x_names.begin(), x_names.end());
  TreeDef y_def;
  auto body = [&](std::span<const Array> t) {
    const Carry c = tree::unflatten<Carry>(carry_def, t.first(nc));
    const Xs x = tree::unflatten<Xs>(xs_def, t.subspan(nc));
    R r = f(c, x);
    tree::Flat co = tree::flatten(std::get<0>(r));
    detail::check_carry("scan", "carry", carry_def, std::span<const Aval>(in).first(nc), co.def,
                        co.leaves);
    tree::Flat yo = tree::flatten(std::get<1>(r));
    y_def = std::move(yo.def);
    std::vector<Array> out = std::move(co.leaves);
    out.insert(out.end(), yo.leaves.begin(), yo.leaves.end());
    return out;
  };
  const detail::ClosedBody b =
      detail::trace_body("scan", body, in, detail::device_of(init_leaves, xs_leaves), names);
  const std::vector<Array> outs = detail::scan_flat(b, init_leaves, xs_leaves, n, reverse);
  const std::span<const Array> all(outs);
  return std::pair<Carry, Y>{tree::unflatten<Carry>(carry_def, all.first(nc)),
                             tree::unflatten<Y>(y_def, all.subspan(nc))};
}

// fori_loop(lower, upper, body, init): carry = body(i, carry) for i in
// [lower, upper) (i an i32 scalar array). The bounds are static, so this is a
// scan and reverse-mode differentiable.
template <class B, class T>
T fori_loop(std::int64_t lower, std::int64_t upper, B&& body, const T& init) {
  TreeDef def;
  const std::vector<Array> leaves = detail::flat_leaves(init, &def);
  const std::int64_t n = upper > lower ? upper - lower : 0;
  const Array is = arange(static_cast<double>(lower), static_cast<double>(lower + n), 1.0,
                          DType::kI32, detail::device_of(leaves));
  auto step = [&](const T& carry, const Array& i) {
    return std::pair<T, std::tuple<>>{body(i, carry), {}};
  };
  return scan(step, init, is, n).first;
}

// while_loop(cond, body, init): while cond(carry) (a bool scalar array),
// carry = body(carry). Forward only: reverse-mode differentiation through it is
// a ValueError (the trip count is known only at run time; use fori_loop or
// scan). On a device backend the condition is read back once per batch of
// iterations, not once per iteration (see docs/TRANSFORMS.md, "Control flow").
template <class C, class B, class T>
T while_loop(C&& cond, B&& body, const T& init) {
  TreeDef def;
  const std::vector<Array> leaves = detail::flat_leaves(init, &def);
  const std::vector<std::string> names = detail::prefixed("carry", def);
  const std::vector<Aval> in = detail::avals_of(leaves, "while_loop", names);
  const Device device = detail::device_of(leaves);
  auto cond_flat = [&](std::span<const Array> t) {
    const Array p = cond(tree::unflatten<T>(def, t));
    if (p.is_null() || p.ndim() != 0 || p.dtype() != DType::kBool) {
      throw ValueError(detail::str_cat_path(
          "while_loop", "cond",
          p.is_null() ? " returned None; it must return a bool scalar"
                      : " must return a bool scalar array, got " + std::string(name(p.dtype())) +
                            to_string(p.shape())));
    }
    return std::vector<Array>{p};
  };
  auto body_flat = [&](std::span<const Array> t) {
    tree::Flat out = tree::flatten(body(tree::unflatten<T>(def, t)));
    detail::check_carry("while_loop", "carry", def, in, out.def, out.leaves);
    return std::move(out.leaves);
  };
  const detail::ClosedBody c = detail::trace_body("while_loop.cond", cond_flat, in, device, names);
  const detail::ClosedBody b = detail::trace_body("while_loop.body", body_flat, in, device, names);
  return tree::unflatten<T>(def, detail::while_flat(c, b, leaves));
}

// switch_case(index, operand, branch0, branch1, ...): branch_k(operand) for k =
// index (an integer scalar array, clamped to [0, n-1]). Every branch returns
// the same structure and avals.
namespace detail {
template <class T, class... Fs>
auto switch_impl(const Array& index, const T& operand, std::span<const std::string> labels,
                 Fs&&... branches) {
  using R = std::remove_cvref_t<
      std::invoke_result_t<std::tuple_element_t<0, std::tuple<Fs...>>&, const T&>>;
  TreeDef def;
  const std::vector<Array> leaves = detail::flat_leaves(operand, &def);
  const std::vector<std::string> names = detail::prefixed("operand", def);
  const std::vector<Aval> in = detail::avals_of(leaves, "cond", names);
  const Device device = detail::device_of(leaves, std::span<const Array>(&index, 1));
  std::vector<detail::ClosedBody> bodies;
  TreeDef out_def;
  std::vector<Aval> out_avals;
  std::size_t k = 0;
  auto add = [&](auto& fn) {
    auto flat = [&](std::span<const Array> t) {
      tree::Flat out = tree::flatten(R(fn(tree::unflatten<T>(def, t))));
      if (k == 0) {
        out_def = out.def;
        out_avals =
            detail::avals_of(out.leaves, "cond", detail::prefixed("branch 0 result", out.def));
      } else {
        detail::check_carry("cond", labels[k] + "'s result (vs " + labels[0] + "'s)", out_def,
                            out_avals, out.def, out.leaves);
      }
      return std::move(out.leaves);
    };
    bodies.push_back(detail::trace_body("cond", flat, in, device, names));
    ++k;
  };
  (add(branches), ...);
  return tree::unflatten<R>(out_def, detail::switch_flat(index, bodies, leaves));
}
}  // namespace detail

template <class T, class... Fs>
requires(sizeof...(Fs) >= 1) auto switch_case(const Array& index, const T& operand,
                                              Fs&&... branches) {
  std::vector<std::string> labels;
  for (std::size_t k = 0; k < sizeof...(Fs); ++k) labels.push_back("branch " + std::to_string(k));
  return detail::switch_impl(index, operand, labels, std::forward<Fs>(branches)...);
}

// cond(pred, true_fn, false_fn, operand): true_fn(operand) where pred (a bool
// or integer scalar array) is true, else false_fn(operand).
template <class TF, class FF, class T>
auto cond(const Array& pred, TF&& true_fn, FF&& false_fn, const T& operand) {
  const std::string labels[] = {"false_fn", "true_fn"};
  return detail::switch_impl(pred, operand, labels, std::forward<FF>(false_fn),
                             std::forward<TF>(true_fn));
}

// checkpoint(f) (jax.checkpoint / remat): the same function, whose values the
// backward pass recomputes from its inputs instead of keeping them alive
// between the forward and the backward pass (less memory, one more forward).
template <class F>
auto checkpoint(F f, std::string name = "checkpoint") {
  return [f = detail::Held<F>{std::move(f)}, name = std::move(name)](const auto&... args) {
    using R =
        std::remove_cvref_t<std::invoke_result_t<const detail::Held<F>&, const decltype(args)&...>>;
    using Args = std::tuple<std::remove_cvref_t<decltype(args)>...>;
    TreeDef def;
    const std::vector<Array> leaves = detail::flat_leaves(Args{args...}, &def);
    const std::vector<std::string> names = detail::prefixed("args", def);
    TreeDef out_def;
    auto flat = [&](std::span<const Array> t) {
      tree::Flat out = tree::flatten(R(std::apply(f, tree::unflatten<Args>(def, t))));
      out_def = std::move(out.def);
      return std::move(out.leaves);
    };
    const detail::ClosedBody b = detail::trace_body(
        name, flat, detail::avals_of(leaves, name, names), detail::device_of(leaves), names);
    return tree::unflatten<R>(out_def, detail::call_flat(b, name, true, leaves));
  };
}

// custom_vjp(f, fwd, bwd) (jax.custom_vjp): a function computing f(args...)
// whose gradient is given by hand. fwd(args...) returns std::pair{f's result,
// residuals (any pytree)}; bwd(residuals, output cotangent) returns one
// cotangent per argument: the argument's own type for one argument, else a
// std::tuple of them (None/null arrays where there is none). Arrays the
// functions capture from an enclosing trace are treated as constants of the
// gradient (no cotangent flows to them).
template <class F, class Fwd, class Bwd>
auto custom_vjp(F f, Fwd fwd, Bwd bwd, std::string name = "custom_vjp") {
  return [f = detail::Held<F>{std::move(f)}, fwd = detail::Held<Fwd>{std::move(fwd)},
          bwd = detail::Held<Bwd>{std::move(bwd)}, name = std::move(name)](const auto&... args) {
    using Args = std::tuple<std::remove_cvref_t<decltype(args)>...>;
    using R =
        std::remove_cvref_t<std::invoke_result_t<const detail::Held<F>&, const decltype(args)&...>>;
    using FwdOut = std::remove_cvref_t<
        std::invoke_result_t<const detail::Held<Fwd>&, const decltype(args)&...>>;
    using Res = std::remove_cvref_t<std::tuple_element_t<1, FwdOut>>;
    TreeDef def;
    const std::vector<Array> leaves = detail::flat_leaves(Args{args...}, &def);
    const std::vector<std::string> names = detail::prefixed("args", def);
    const std::vector<Aval> in = detail::avals_of(leaves, name, names);
    const Device device = detail::device_of(leaves);
    TreeDef out_def, res_def;
    std::vector<Aval> out_avals, res_avals;
    auto primal = [&](std::span<const Array> t) {
      tree::Flat out = tree::flatten(R(std::apply(f, tree::unflatten<Args>(def, t))));
      out_def = out.def;
      out_avals = detail::avals_of(out.leaves, name, detail::prefixed("result", out.def));
      return std::move(out.leaves);
    };
    auto forward = [&](std::span<const Array> t) {
      FwdOut fo = std::apply(fwd, tree::unflatten<Args>(def, t));
      tree::Flat out = tree::flatten(R(std::get<0>(fo)));
      detail::check_carry(name, "fwd's result (vs the function's)", out_def, out_avals, out.def,
                          out.leaves);
      tree::Flat res = tree::flatten(Res(std::get<1>(fo)));
      res_def = res.def;
      res_avals = detail::avals_of(res.leaves, name, detail::prefixed("residuals", res.def));
      std::vector<Array> all = std::move(out.leaves);
      all.insert(all.end(), res.leaves.begin(), res.leaves.end());
      return all;
    };
    auto backward = [&](std::span<const Array> t) {
      const std::size_t nr = res_avals.size();
      const Res res = tree::unflatten<Res>(res_def, t.first(nr));
      const R ct = tree::unflatten<R>(out_def, t.subspan(nr));
      Args cts;
      if constexpr (sizeof...(args) == 1) {
        std::get<0>(cts) = bwd(res, ct);
      } else {
        cts = bwd(res, ct);
      }
      tree::Flat g = tree::flatten(cts);
      return detail::fill_cotangents(name, def, in, device, g.def, g.leaves);
    };
    const detail::ClosedBody p = detail::trace_body(name, primal, in, device, names);
    const detail::ClosedBody fw = detail::trace_body(name, forward, in, device, names);
    std::vector<Aval> bwd_in = res_avals;
    bwd_in.insert(bwd_in.end(), out_avals.begin(), out_avals.end());
    std::vector<std::string> bwd_names = detail::prefixed("residuals", res_def);
    const std::vector<std::string> ct_names = detail::prefixed("cotangent", out_def);
    bwd_names.insert(bwd_names.end(), ct_names.begin(), ct_names.end());
    const detail::ClosedBody bw = detail::trace_body(name, backward, bwd_in, device, bwd_names);
    return tree::unflatten<R>(out_def,
                              detail::custom_vjp_flat(p, fw, bw, name, res_avals.size(), leaves));
  };
}

}  // namespace kiln
