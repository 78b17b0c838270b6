// vmap: the batching interpreter and one batching rule per primitive.
//
// A value is either unbatched (the example's aval) or batched along axis 0
// (extent B). An equation none of whose inputs is batched is bound as it is;
// otherwise its rule rebinds the primitive (or a few DSL ops) on batched
// operands and returns results batched along axis 0. Rules that have no
// vectorised form (scatters with batched indices, take with both operands
// batched, control flow) run the equation once per example and stack the
// results: correct, B equations instead of one.
#include "kiln/dsl/vmap.hpp"

#include <numeric>

#include "absl/container/inlined_vector.h"
#include "kiln/dsl/control_run.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {

void bad_in_axes(std::size_t given, std::size_t args) {
  throw ValueError(str_cat("[vmap] in_axes has ", given, " entries for ", args,
                           " arguments (one per argument, std::nullopt for an unbatched one)"));
}

std::vector<std::string> vmap_names(const TreeDef& def, std::size_t arg) {
  std::vector<std::string> out = tree::paths(def);
  for (std::string& p : out) {
    p = str_cat("arg", arg, p.empty() || p.front() == '[' ? "" : ".", p);
  }
  return out;
}

Device device_of_any(std::span<const Array> in) {
  return in.empty() ? default_device() : in.front().device();
}

namespace {

Shape with_batch(std::int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// [0, 1, ..., n-1] with axis `from` moved to position `to`.
Axes move_perm(std::int64_t n, std::int64_t from, std::int64_t to) {
  Axes rest;
  for (std::int64_t i = 0; i < n; ++i) {
    if (i != from) rest.push_back(i);
  }
  rest.insert(rest.begin() + to, from);
  return rest;
}

Array move_axis(const Array& a, std::int64_t from, std::int64_t to) {
  if (from == to) return a;
  return transpose(a, move_perm(a.ndim(), from, to));
}

// An unbatched operand made batched (every example the same).
Array materialize(const Array& a, bool batched, std::int64_t b) {
  if (batched) return a;
  return broadcast_to(expand_dims(a, 0), with_batch(b, a.shape()));
}

// A batched operand of example rank r reshaped so that numpy broadcasting
// against example shapes of rank `rank` lines its example axes up on the
// right: (B, 1, ..., 1, example shape).
Array align(const Array& a, std::int64_t rank) {
  const std::int64_t own = a.ndim() - 1;
  if (own >= rank) return a;
  Shape s{a.shape()[0]};
  for (std::int64_t i = own; i < rank; ++i) s.push_back(1);
  s.insert(s.end(), a.shape().begin() + 1, a.shape().end());
  return reshape(a, s);
}

// Example b of a batched operand.
Array example(const Array& a, std::int64_t b) {
  return reshape(slice_axis(a, 0, b, b + 1), Shape(a.shape().begin() + 1, a.shape().end()));
}

// The equation once per example, results stacked.
std::vector<Array> per_example(const Equation& eq, std::span<const Array> in,
                               std::span<const bool> batched, std::span<const Aval> outs,
                               std::int64_t batch) {
  std::vector<std::vector<Array>> parts(outs.size());
  std::vector<Array> args(in.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::size_t i = 0; i < in.size(); ++i) args[i] = batched[i] ? example(in[i], b) : in[i];
    std::vector<Array> r;
    if (family(eq.prim) == PrimFamily::kControl) {
      r = bind_multi(eq.prim, eq.params, args, outs);
    } else {
      r = {bind(eq.prim, eq.params, args, outs[0])};
    }
    for (std::size_t j = 0; j < r.size(); ++j) parts[j].push_back(std::move(r[j]));
  }
  std::vector<Array> out;
  for (std::size_t j = 0; j < outs.size(); ++j) {
    out.push_back(batch == 0 ? zeros(with_batch(0, outs[j].shape), outs[j].dtype, device_of_any(in))
                             : stack(parts[j], 0));
  }
  return out;
}

std::vector<Array> batch_rule(const Equation& eq, std::span<const Array> in,
                              std::span<const bool> batched, std::span<const Aval> outs,
                              std::int64_t B) {
  const Aval out{outs[0].dtype, with_batch(B, outs[0].shape)};
  const auto one = [](Array a) { return std::vector<Array>{std::move(a)}; };
  const auto rebind = [&](const Params& params, std::span<const Array> args) {
    return std::vector<Array>{bind(eq.prim, params, args, out)};
  };
  return visit_prim(eq.prim, [&]<Prim P>(PrimC<P>) -> std::vector<Array> {
    constexpr PrimFamily F = family(P);
    if constexpr (F == PrimFamily::kUnary || F == PrimFamily::kAstype ||
                  F == PrimFamily::kIdentity) {
      return rebind(eq.params, in);
    } else if constexpr (F == PrimFamily::kBinary || F == PrimFamily::kWhere) {
      // numpy broadcasting of the example shapes, batch axis in front.
      const auto rank = static_cast<std::int64_t>(outs[0].shape.size());
      std::vector<Array> args;
      for (std::size_t i = 0; i < in.size(); ++i)
        args.push_back(batched[i] ? align(in[i], rank) : in[i]);
      return rebind(eq.params, args);
    } else if constexpr (F == PrimFamily::kReduce) {
      ReduceParams q = eq.params.as<ReduceParams>();
      for (auto& ax : q.axes) ax += 1;
      return rebind(q, in);
    } else if constexpr (F == PrimFamily::kArgReduce || F == PrimFamily::kScan ||
                         F == PrimFamily::kSort) {
      auto q = eq.params.as<ParamsOf<P>>();
      q.axis += 1;
      return rebind(q, in);
    } else if constexpr (F == PrimFamily::kMatmul) {
      // Operands are >= 2-D; their leading (batch) axes broadcast.
      const auto rank = static_cast<std::int64_t>(outs[0].shape.size());
      const Array args[2] = {batched[0] ? align(in[0], rank) : in[0],
                             batched[1] ? align(in[1], rank) : in[1]};
      return rebind(eq.params, args);
    } else if constexpr (P == Prim::kReshape || P == Prim::kBroadcastTo) {
      const Shape& target = eq.params.as<ShapeParams>().shape;
      if constexpr (P == Prim::kReshape) {
        return rebind(ShapeParams{with_batch(B, target)}, in);
      } else {
        const Array a = align(in[0], static_cast<std::int64_t>(target.size()));
        return rebind(ShapeParams{with_batch(B, target)}, std::span<const Array>(&a, 1));
      }
    } else if constexpr (P == Prim::kTranspose) {
      Axes perm{0};
      for (auto ax : eq.params.as<TransposeParams>().perm) perm.push_back(ax + 1);
      return rebind(TransposeParams{perm}, in);
    } else if constexpr (P == Prim::kConcatenate || P == Prim::kTakeAlongAxis ||
                         P == Prim::kScatterAddAlongAxis) {
      // Operands aligned element by element: batch them all, axis + 1.
      std::vector<Array> args;
      for (std::size_t i = 0; i < in.size(); ++i) args.push_back(materialize(in[i], batched[i], B));
      return rebind(AxisParams{eq.params.as<AxisParams>().axis + 1}, args);
    } else if constexpr (P == Prim::kSlice) {
      SliceParams q = eq.params.as<SliceParams>();
      q.starts.insert(q.starts.begin(), 0);
      q.steps.insert(q.steps.begin(), 1);
      q.shape = with_batch(B, q.shape);
      return rebind(q, in);
    } else if constexpr (F == PrimFamily::kWindow) {
      return rebind(eq.params, in);  // the batch axis is one more leading axis
    } else if constexpr (P == Prim::kTake) {
      const std::int64_t axis = eq.params.as<AxisParams>().axis;
      if (batched[0] && !batched[1]) return rebind(AxisParams{axis + 1}, in);
      if (!batched[0] && batched[1]) {
        // The batch axis of the indices lands at `axis` of the result.
        const Aval moved{outs[0].dtype, [&] {
                           Shape s = outs[0].shape;
                           s.insert(s.begin() + axis, B);
                           return s;
                         }()};
        return one(move_axis(bind(eq.prim, eq.params, in, moved), axis, 0));
      }
      return per_example(eq, in, batched, outs, B);
    } else if constexpr (P == Prim::kOneHot) {
      OneHotParams q = eq.params.as<OneHotParams>();
      q.axis += 1;
      return rebind(q, in);
    } else if constexpr (P == Prim::kScatter || P == Prim::kScatterAdd) {
      if (batched[1]) return per_example(eq, in, batched, outs, B);
      // Indices shared: the operand and the updates carry the batch axis.
      const Array args[3] = {materialize(in[0], batched[0], B), in[1],
                             materialize(in[2], batched[2], B)};
      return rebind(AxisParams{eq.params.as<AxisParams>().axis + 1}, args);
    } else if constexpr (F == PrimFamily::kCreation) {
      return rebind(eq.params, in);  // never batched (no inputs); not reached
    } else if constexpr (F == PrimFamily::kControl) {
      return per_example(eq, in, batched, outs, B);
    } else {
      static_assert(kUnhandled<P>, "a primitive without a batching rule");
    }
  });
}

}  // namespace

Array move_batch_axis(const Array& a, std::int64_t axis) {
  const std::int64_t to = axis < 0 ? axis + a.ndim() : axis;
  if (to < 0 || to >= a.ndim()) {
    throw ShapeError(str_cat("[vmap] out_axis ", axis, " is out of range for a result of rank ",
                             a.ndim() - 1, " (plus the batch axis)"));
  }
  return move_axis(a, 0, to);
}

std::vector<Array> batch_program(const Program& p, std::span<const Array> inputs,
                                 std::span<const bool> batched, std::int64_t batch) {
  std::vector<Array> env(p.num_values());
  std::vector<bool> is_batched(p.num_values(), false);
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    env[p.inputs[i]] = inputs[i];
    is_batched[p.inputs[i]] = batched[i];
  }
  for (std::size_t i = 0; i < p.constants.size(); ++i) env[p.constants[i]] = p.constant_values[i];
  std::vector<Array> args;
  std::vector<Aval> outs;
  absl::InlinedVector<bool, 4> flag_vec;
  for (const Equation& eq : p.equations) {
    args.clear();
    flag_vec.clear();
    bool any = false;
    for (ValueId v : eq.inputs) {
      args.push_back(env[v]);
      flag_vec.push_back(is_batched[v]);
      any = any || is_batched[v];
    }
    const auto ids = outputs_of(eq);
    outs.clear();
    for (ValueId v : ids) outs.push_back(p.avals[v]);
    std::vector<Array> r;
    if (!any) {
      r = family(eq.prim) == PrimFamily::kControl
              ? bind_multi(eq.prim, eq.params, args, outs)
              : std::vector<Array>{bind(eq.prim, eq.params, args, outs[0])};
    } else {
      r = batch_rule(eq, args, flag_vec, outs, batch);
    }
    for (std::size_t j = 0; j < ids.size(); ++j) {
      env[ids[j]] = std::move(r[j]);
      is_batched[ids[j]] = any;
    }
  }
  std::vector<Array> result;
  for (ValueId v : p.outputs) {
    result.push_back(is_batched[v] ? env[v] : materialize(env[v], false, batch));
  }
  return result;
}

std::vector<Array> vmap_flat(FlatFn f, std::span<const Array> leaves,
                             std::span<const std::optional<std::int64_t>> axes,
                             std::span<const std::string> names) {
  std::optional<std::int64_t> batch;
  std::size_t first = 0;
  std::vector<Array> moved(leaves.begin(), leaves.end());
  absl::InlinedVector<bool, 8> batched(leaves.size(), false);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!axes[i].has_value()) continue;
    const Array& a = leaves[i];
    const std::int64_t ax = *axes[i] < 0 ? *axes[i] + a.ndim() : *axes[i];
    if (ax < 0 || ax >= a.ndim()) {
      throw ShapeError(str_cat("[vmap] ", names[i], " has shape ", to_string(a.shape()),
                               ": no axis ", *axes[i], " to map over"));
    }
    const std::int64_t n = a.shape()[ax];
    if (batch.has_value() && *batch != n) {
      throw ShapeError(str_cat("[vmap] ", names[i], " has ", n, " examples along axis ", ax,
                               " but ", names[first], " has ", *batch,
                               "; every mapped array needs the same batch size"));
    }
    if (!batch.has_value()) first = i;
    batch = n;
    moved[i] = move_axis(a, ax, 0);
    batched[i] = true;
  }
  if (!batch.has_value()) {
    throw ValueError("[vmap] no argument is mapped: in_axes maps no array (nothing to batch over)");
  }
  Program p;
  {
    Trace t("vmap");
    std::vector<Array> tracers;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      Aval a = moved[i].aval();
      if (batched[i]) a.shape.erase(a.shape.begin());
      tracers.push_back(t.input(a, leaves[i].device(), names[i]));
    }
    const std::vector<Array> outs = f(tracers);
    for (const Array& o : outs) {
      if (o.is_null()) throw ValueError("[vmap] the function returned None");
    }
    p = t.finish(outs);
  }
  // Arrays from an enclosing trace the function used are program constants;
  // they are unbatched operands, bound as they are.
  return batch_program(p, moved, batched, *batch);
}

}  // namespace kiln::detail
