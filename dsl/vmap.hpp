// vmap: vectorising map (jax.vmap). vmap(f, in_axes, out_axis)(args...) runs f
// once over a batch: each argument's arrays carry a batch axis (in_axes: one
// entry per argument, the axis of its array leaves, or std::nullopt for an
// argument shared by every example), and each result leaf gets one at
// out_axis. f is traced once on one example's avals; every equation of the
// program is then rewritten by its primitive's batching rule (dsl/vmap.cpp, a
// compile-time complete table like the vjp rules: a primitive without a rule
// does not compile). Everything goes through the DSL, so vmap composes with
// grad (vmap(grad(f)): per-example gradients), filter_jit and itself.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "kiln/dsl/callable.hpp"
#include "kiln/dsl/program.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln {

using InAxes = std::vector<std::optional<std::int64_t>>;

namespace detail {

using FlatFn = absl::FunctionRef<std::vector<Array>(std::span<const Array>)>;

// Traces f on one example of `leaves` (axis axes[i] of leaf i removed, or the
// whole leaf where axes[i] is nullopt) and returns its results batched along
// axis 0. `names` label the leaves in errors.
std::vector<Array> vmap_flat(FlatFn f, std::span<const Array> leaves,
                             std::span<const std::optional<std::int64_t>> axes,
                             std::span<const std::string> names);

// Runs program p on inputs of which those flagged in `batched` carry a
// leading batch axis of extent `batch`; returns p's outputs batched along 0.
std::vector<Array> batch_program(const Program& p, std::span<const Array> inputs,
                                 std::span<const bool> batched, std::int64_t batch);

// The device of the first array (the default device when there is none).
Device device_of_any(std::span<const Array> in);
// Moves axis 0 of `a` to `axis` (negative counts from the end).
Array move_batch_axis(const Array& a, std::int64_t axis);

std::vector<std::string> vmap_names(const TreeDef& def, std::size_t arg);
[[noreturn]] void bad_in_axes(std::size_t given, std::size_t args);

}  // namespace detail

template <class F>
auto vmap(F f, InAxes in_axes = {}, std::int64_t out_axis = 0) {
  return [f = detail::Held<F>{std::move(f)}, in_axes = std::move(in_axes),
          out_axis](const auto&... args) {
    using Args = std::tuple<std::remove_cvref_t<decltype(args)>...>;
    using R =
        std::remove_cvref_t<std::invoke_result_t<const detail::Held<F>&, const decltype(args)&...>>;
    if (!in_axes.empty() && in_axes.size() != sizeof...(args)) {
      detail::bad_in_axes(in_axes.size(), sizeof...(args));
    }
    std::vector<Array> leaves;
    std::vector<std::optional<std::int64_t>> axes;
    std::vector<std::string> names;
    std::vector<TreeDef> defs;
    std::size_t arg = 0;
    auto add = [&](const auto& a) {
      tree::Flat flat = tree::flatten(a);
      const std::optional<std::int64_t> ax =
          in_axes.empty() ? std::optional<std::int64_t>(0) : in_axes[arg];
      const std::vector<std::string> n = detail::vmap_names(flat.def, arg);
      for (std::size_t i = 0; i < flat.leaves.size(); ++i) {
        leaves.push_back(flat.leaves[i]);
        axes.push_back(ax);
        names.push_back(n[i]);
      }
      defs.push_back(std::move(flat.def));
      ++arg;
    };
    (add(args), ...);
    TreeDef out_def;
    auto flat_f = [&](std::span<const Array> t) {
      std::size_t at = 0, k = 0;
      auto next = [&]<class A>(std::type_identity<A>) {
        const std::size_t n = defs[k].num_leaves();
        A v = tree::unflatten<A>(defs[k++], t.subspan(at, n));
        at += n;
        return v;
      };
      // Braced initialisation evaluates the arguments left to right.
      const Args typed{next(std::type_identity<std::remove_cvref_t<decltype(args)>>{})...};
      tree::Flat out = tree::flatten(R(std::apply(f, typed)));
      out_def = std::move(out.def);
      return std::move(out.leaves);
    };
    std::vector<Array> outs = detail::vmap_flat(flat_f, leaves, axes, names);
    if (out_axis != 0) {
      for (Array& o : outs) o = detail::move_batch_axis(o, out_axis);
    }
    return tree::unflatten<R>(out_def, outs);
  };
}

}  // namespace kiln
