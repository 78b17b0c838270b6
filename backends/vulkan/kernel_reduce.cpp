// Reductions. The input is viewed over (kept..., reduced...). Small reductions
// (or many outputs) run one invocation per output looping over the reduced
// elements; large ones run one workgroup per output: each invocation folds a
// strided share, then a shared-memory tree combines the workgroup's partials.
// sum of f16 accumulates in f32; integer sums wrap; max/min propagate NaN.
#include <algorithm>
#include <limits>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

using spv::Builder;
using spv::Ty;
using spv::Val;

// Collapses dims within one group (kept or reduced) of views: neighbours merge
// where every view walks them as one.
void collapse_group(Shape& dims, std::vector<Shape>& strides) {
  Shape nd;
  std::vector<Shape> ns(strides.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = !nd.empty();
    for (std::size_t v = 0; merge && v < strides.size(); ++v) {
      merge = ns[v].back() == strides[v][d] * dims[d];
    }
    if (merge) {
      nd.back() *= dims[d];
      for (std::size_t v = 0; v < strides.size(); ++v) ns[v].back() = strides[v][d];
    } else {
      nd.push_back(dims[d]);
      for (std::size_t v = 0; v < strides.size(); ++v) ns[v].push_back(strides[v][d]);
    }
  }
  dims = nd;
  strides = ns;
}

// Row-major digits of x over dims.
std::vector<Val> split_index(Builder& b, Val x, const Shape& dims) {
  std::vector<Val> idx(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    Val extent = b.u32(static_cast<std::uint32_t>(dims[d]));
    idx[d] = d == 0 ? x : b.op("OpUMod", Ty::kU32, {x, extent});
    if (d > 0) x = b.op("OpUDiv", Ty::kU32, {x, extent});
  }
  return idx;
}

Val dot(Builder& b, Val off, const std::vector<Val>& idx, const Shape& strides) {
  for (std::size_t d = 0; d < idx.size(); ++d) {
    if (strides[d] == 0) continue;
    off = b.op("OpIAdd", Ty::kU32,
               {off, b.op("OpIMul", Ty::kU32,
                          {idx[d], b.u32(static_cast<std::uint32_t>(strides[d]))})});
  }
  return off;
}

}  // namespace

Val offset_of(Builder& b, Val x, const Shape& dims, const Shape& strides) {
  Val off = b.u32(0);
  for (std::size_t d = dims.size(); d-- > 0;) {
    Val extent = b.u32(static_cast<std::uint32_t>(dims[d]));
    Val idx = d == 0 ? x : b.op("OpUMod", Ty::kU32, {x, extent});
    if (d > 0) x = b.op("OpUDiv", Ty::kU32, {x, extent});
    off = b.op("OpIAdd", Ty::kU32,
               {off, b.op("OpIMul", Ty::kU32,
                          {idx, b.u32(static_cast<std::uint32_t>(strides[d]))})});
  }
  return off;
}

namespace {

// The elementwise primitive a reduction combines with (argmax/argmin: the
// maximum/minimum they track), for every row of the two reduction families.
Prim combining(Prim op) {
  return visit_prim(op, []<Prim P>(PrimC<P>) {
    if constexpr (P == Prim::kSum) {
      return Prim::kAdd;
    } else if constexpr (P == Prim::kProd) {
      return Prim::kMul;
    } else if constexpr (P == Prim::kMax || P == Prim::kArgmax) {
      return Prim::kMaximum;
    } else if constexpr (P == Prim::kMin || P == Prim::kArgmin) {
      return Prim::kMinimum;
    } else if constexpr (family(P) == PrimFamily::kReduce ||
                         family(P) == PrimFamily::kArgReduce) {
      static_assert(kUnhandled<P>, "a reduction without a Vulkan combine");
    } else {
      return Prim::kAdd;  // not a reduction: reduce_spec is never given one
    }
  });
}

double identity(Prim op, Ty t) {
  const double inf = std::numeric_limits<double>::infinity();
  const Prim c = combining(op);
  if (c == Prim::kAdd) return 0;
  if (c == Prim::kMul) return 1;
  const bool mx = c == Prim::kMaximum;
  switch (t) {
    case Ty::kBool: return mx ? 0 : 1;
    case Ty::kI32: return mx ? -2147483648.0 : 2147483647.0;
    case Ty::kU32: return mx ? 0 : 4294967295.0;
    default: return mx ? -inf : inf;
  }
}

Val combine(Builder& b, Prim op, const Val& x, const Val& y, DType in) {
  const Val args[] = {x, y};
  return emit_elementwise(b, combining(op), Params{}, args, in, in);
}

// How a reduction spreads over invocations: `columns` outputs per workgroup
// and `slices` invocations per output (columns * slices = the workgroup), or
// one invocation per output (slices = 1) looping over all its elements.
struct Tiling {
  std::uint32_t columns = 1, slices = 1;
  bool lanes_on_columns = false;
};

Tiling tiling(const Context& ctx, const Shape& kept, const Shape& ks, const Shape& red,
              const Shape& rs, bool arg, std::uint32_t local) {
  const std::int64_t outs = numel(kept), r_count = numel(red);
  const std::int64_t wanted = ctx.caps().parallel_invocations;
  Tiling t;
  t.columns = local;
  t.lanes_on_columns = true;
  // Short folds, and outputs enough to fill the device: one invocation each.
  if (arg || r_count < 64 || outs >= wanted) return t;
  const auto pow2_floor = [](std::int64_t x) {
    std::uint32_t p = 1;
    while (static_cast<std::int64_t>(p) * 2 <= x && p < (1u << 30)) p *= 2;
    return p;
  };
  // A column reduction: the outputs walk the input's contiguous dim, the
  // reduced elements do not. Lanes then run along the outputs, as few per
  // workgroup (at least 8: one 32-byte sector of f32 per row) as keep enough
  // workgroups for the device, the rest of the workgroup splitting the rows.
  const bool column = !ks.empty() && ks.back() == 1 &&
                      std::all_of(rs.begin(), rs.end(), [](std::int64_t x) { return x != 1; });
  if (column) {
    std::uint32_t c = std::min<std::uint32_t>(32, local);
    while (c > 8 && outs / c * local < wanted) c /= 2;
    t.columns = c;
    t.slices = local / c;
    return t;
  }
  // Contiguous (or strided) reduced elements: a team of slices per output,
  // lanes along the elements, as many as fill the device (a whole workgroup
  // for a few outputs), at least 8.
  t.slices = std::clamp<std::uint32_t>(pow2_floor(wanted / outs), 8,
                                       std::min(local, pow2_floor(r_count)));
  t.columns = local / t.slices;
  t.lanes_on_columns = false;
  return t;
}

}  // namespace

ReduceSpec reduce_spec(Prim p, const Params& params, const Shape& shape, DType in, DType out) {
  const Axes axes = family(p) == PrimFamily::kArgReduce
                        ? Axes{params.as<ArgReduceParams>().axis}
                        : params.as<ReduceParams>().axes;
  const Shape own = contiguous_strides(shape);
  ReduceSpec s;
  Shape kstr, rstr;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool r = std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) != axes.end();
    (r ? s.reduced : s.kept).push_back(shape[d]);
    (r ? rstr : kstr).push_back(own[d]);
  }
  s.view.strides = kstr;
  s.view.strides.insert(s.view.strides.end(), rstr.begin(), rstr.end());
  s.in = in;
  s.out = out;
  s.op = p;
  return s;
}

Launch reduce_kernel(Context& ctx, const ReduceSpec& s, std::uint32_t addressed) {
  Shape kept = s.kept, red = s.reduced;
  // View 0 is the input's (with a prologue: where its other results go), then
  // the prologue's inputs.
  std::vector<View> views{s.view};
  if (s.fused != nullptr) views.insert(views.end(), s.fused->views.begin(), s.fused->views.end());
  const auto split = static_cast<std::ptrdiff_t>(kept.size());
  std::vector<Shape> kstr, rstr;
  for (const View& v : views) {
    kstr.emplace_back(v.strides.begin(), v.strides.begin() + split);
    rstr.emplace_back(v.strides.begin() + split, v.strides.end());
  }
  collapse_group(kept, kstr);
  collapse_group(red, rstr);
  const Shape& ks = kstr[0];
  const Shape& rs = rstr[0];
  const std::int64_t outs = numel(kept), r_count = numel(red);
  const bool arg = s.op == Prim::kArgmax || s.op == Prim::kArgmin;
  const std::uint32_t local = local_size(ctx);
  const Tiling t = tiling(ctx, kept, ks, red, rs, arg, local);
  const bool per_group = t.slices > 1;
  const Ty acc_t = spv::compute_type(s.in);
  // Each invocation loops over its share of the reduced elements; where the
  // driver caps loop iterations, several elements per iteration keep it under.
  std::uint32_t unroll = 1;
  if (const std::uint64_t limit = ctx.quirks().max_loop_iterations; limit > 0) {
    const std::uint64_t trips = (static_cast<std::uint64_t>(r_count) + t.slices - 1) / t.slices;
    while (trips > limit * unroll) unroll *= 2;
  }
  std::string key = detail::str_cat(
      "reduce|", name(s.op), "|", name(s.in), ">", name(s.out), "|k=",
      detail::join(kept, ","), "/", detail::join(ks, ","), "|r=", detail::join(red, ","),
      "/", detail::join(rs, ","), "|o=", s.view.offset, "|t=", t.columns, "x", t.slices,
      t.lanes_on_columns ? "c" : "r", "|u", unroll);
  if (addressed != 0) key += detail::str_cat("|addr=", addressed);
  if (s.fused != nullptr) {
    key += detail::str_cat("|pro=", s.fused->key, "|");
    for (std::size_t k = 0; k < s.fused->inputs.size(); ++k) {
      key += detail::str_cat(name(s.fused->inputs[k]), "@", views[k + 1].offset, ":",
                             detail::join(kstr[k + 1], ","), "/", detail::join(rstr[k + 1], ","),
                             ";");
    }
    for (DType d : s.fused->outputs) key += detail::str_cat(">", name(d));
  }
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 1, addressed);
    const std::size_t n_in = s.fused != nullptr ? s.fused->inputs.size() : 1;
    if (s.fused != nullptr) {
      for (DType d : s.fused->inputs) b.buffer(d, true);
      for (DType d : s.fused->outputs) b.buffer(d, false);
    } else {
      b.buffer(s.in, true);
    }
    const int in = 0;
    const int out = b.buffer(s.out, false);
    const Val n_red = b.u32(static_cast<std::uint32_t>(r_count));
    // Per output o: element offsets of its first reduced element in each view.
    std::vector<Val> bases;
    const auto base_of = [&](const Val& o) {
      if (s.fused == nullptr) {
        return b.op("OpIAdd", Ty::kU32,
                    {b.u32(static_cast<std::uint32_t>(s.view.offset)), offset_of(b, o, kept, ks)});
      }
      const std::vector<Val> idx = split_index(b, o, kept);
      bases.clear();
      for (std::size_t v = 0; v < views.size(); ++v) {
        bases.push_back(
            dot(b, b.u32(static_cast<std::uint32_t>(views[v].offset)), idx, kstr[v]));
      }
      return bases[0];
    };
    const auto elem = [&](const Val& base, const Val& r) {
      if (s.fused == nullptr) {
        return b.load(in, b.op("OpIAdd", Ty::kU32, {base, offset_of(b, r, red, rs)}));
      }
      // The prologue at this element: its inputs through their views, its other
      // results stored where the reduced array's element would be.
      const std::vector<Val> idx = split_index(b, r, red);
      const LoadFn load = [&](std::size_t k) {
        return b.load(static_cast<int>(k), dot(b, bases[k + 1], idx, rstr[k + 1]));
      };
      const std::vector<Val> results = s.prologue(b, load);
      const Val at = dot(b, bases[0], idx, rs);
      for (std::size_t o = 1; o < results.size(); ++o) {
        b.store(static_cast<int>(n_in + o - 1), at, results[o]);
      }
      return results[0];
    };
    if (per_group) {
      // Workgroup = columns x slices: output o = workgroup * columns + column;
      // slice q folds reduced elements q, q + slices, ...; then a shared-memory
      // tree over the slices. Lanes run along the columns where the outputs
      // are the input's contiguous dim (a column reduction: each row's read is
      // coalesced), else along the slices (contiguous reduced elements).
      const int sh = b.shared(acc_t, local);
      const Val lid = b.invocation();
      const Val cols = b.u32(t.columns), slices = b.u32(t.slices);
      const Val col = t.lanes_on_columns ? b.op("OpUMod", Ty::kU32, {lid, cols})
                                         : b.op("OpUDiv", Ty::kU32, {lid, slices});
      const Val q = t.lanes_on_columns ? b.op("OpUDiv", Ty::kU32, {lid, cols})
                                       : b.op("OpUMod", Ty::kU32, {lid, slices});
      const Val o = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {b.workgroup(), cols}), col});
      const Val live = b.op("OpULessThan", Ty::kBool, {o, b.push(0)});
      // Columns past the end fold the last output (every invocation reaches the barriers).
      const Val base = base_of(b.select(live, o, b.op("OpISub", Ty::kU32, {b.push(0), b.u32(1)})));
      spv::Var acc = b.variable(acc_t);
      b.set(acc, b.constant(acc_t, identity(s.op, acc_t)));
      b.loop(q, n_red, slices, [&](const Val& r) {
        b.set(acc, combine(b, s.op, b.get(acc), elem(base, r), s.in));
      }, unroll);
      const Val at = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {q, cols}), col});
      b.store_shared(sh, at, b.get(acc));
      b.barrier();
      for (std::uint32_t half = t.slices / 2; half > 0; half /= 2) {
        b.if_then(b.op("OpULessThan", Ty::kBool, {q, b.u32(half)}), [&] {
          Val other = b.load_shared(sh, b.op("OpIAdd", Ty::kU32, {at, b.u32(half * t.columns)}));
          b.store_shared(sh, at, combine(b, s.op, b.load_shared(sh, at), other, s.in));
        });
        b.barrier();
      }
      b.if_then(b.op("OpLogicalAnd", Ty::kBool, {live, b.op("OpIEqual", Ty::kBool, {q, b.u32(0)})}),
                [&] { b.store(out, o, b.load_shared(sh, col)); });
    } else {
      Val o = b.global_index();
      b.if_then(b.op("OpULessThan", Ty::kBool, {o, b.push(0)}), [&] {
        Val base = base_of(o);
        if (!arg) {
          spv::Var acc = b.variable(acc_t);
          b.set(acc, b.constant(acc_t, identity(s.op, acc_t)));
          b.loop(b.u32(0), n_red, b.u32(1), [&](const Val& r) {
            b.set(acc, combine(b, s.op, b.get(acc), elem(base, r), s.in));
          }, unroll);
          b.store(out, o, b.get(acc));
          return;
        }
        // argmax/argmin: the first extreme element; a NaN is the extreme.
        const Ty vt = acc_t == Ty::kBool ? Ty::kU32 : acc_t;
        spv::Var best = b.variable(vt);
        spv::Var where = b.variable(Ty::kU32);
        b.set(best, b.convert(elem(base, b.u32(0)), vt));
        b.set(where, b.u32(0));
        b.loop(b.u32(1), n_red, b.u32(1), [&](const Val& r) {
          Val v = b.convert(elem(base, r), vt);
          Val cur = b.get(best);
          const Prim cmp = s.op == Prim::kArgmax ? Prim::kGt : Prim::kLt;
          const Val args[] = {v, cur};
          Val better = emit_elementwise(b, cmp, Params{}, args, s.in, DType::kBool);
          if (spv::is_float(vt)) {
            Val cur_nan = b.op("OpIsNan", Ty::kBool, {cur});
            Val v_nan = b.op("OpIsNan", Ty::kBool, {v});
            better = b.op("OpLogicalAnd", Ty::kBool,
                          {b.op("OpLogicalNot", Ty::kBool, {cur_nan}),
                           b.op("OpLogicalOr", Ty::kBool, {better, v_nan})});
          }
          b.set(best, b.select(better, v, cur));
          b.set(where, b.select(better, r, b.get(where)));
        }, unroll);
        b.store(out, o, b.bitcast(b.get(where), Ty::kI32));
      });
    }
    return KernelSource{b.finish(), static_cast<std::uint32_t>(out + 1), 1, 0,
                        VK_FORMAT_UNDEFINED, addressed};
  });
  Launch l;
  l.pipeline = &p;
  l.push = {static_cast<std::uint32_t>(outs)};
  l.groups = per_group ? grid_for(ctx, (static_cast<std::uint64_t>(outs) + t.columns - 1) / t.columns, "reduce")
                       : grid_for(ctx, (static_cast<std::uint64_t>(outs) + local - 1) / local,
                                  "reduce");
  return l;
}

}  // namespace kiln::vk
