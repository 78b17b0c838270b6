// vjp rules for every primitive, in the DSL.
#include "kiln/dsl/vjp.hpp"

#include "kiln/dsl/unary_math.hpp"

#include <numeric>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {
namespace {

Array as_float(const Array& mask, DType dtype) { return astype(mask, dtype); }

// op(x) @ op(y) with op a swap of the last two axes where tx / ty: the
// matmul primitive's flags, so no transpose is materialised (x and y are >= 2-D).
Array matmul_flags(const Array& x, bool tx, const Array& y, bool ty) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  Shape out = broadcast_shapes("matmul", Shape(xs.begin(), xs.end() - 2),
                               Shape(ys.begin(), ys.end() - 2));
  out.push_back(xs[xs.size() - (tx ? 1 : 2)]);
  out.push_back(ys[ys.size() - (ty ? 2 : 1)]);
  const Array ops[] = {x, y};
  return bind<Prim::kMatmul>(MatmulParams{tx, ty}, ops, Aval{x.dtype(), std::move(out)});
}

// Transpose of a reduction: g (reduced shape) broadcast back to `shape`.
Array expand_reduced(const Array& g, const Params& params, const Shape& shape) {
  Shape kept = shape;
  for (auto ax : params.as<ReduceParams>().axes) kept[ax] = 1;
  return broadcast_to(reshape(g, kept), shape);
}

// Transpose of a strided slice along every axis: zeros with g at the sliced spots.
Array unslice(const Array& g, const SliceParams& q, const Shape& shape) {
  Array out = g;
  for (std::size_t ax = 0; ax < shape.size(); ++ax) {
    const std::int64_t n = out.shape()[ax], start = q.starts[ax], step = q.steps[ax];
    const std::int64_t full_len = shape[ax];
    if (n == full_len) continue;
    Array spread = out;
    if (step > 1 && n > 0) {
      // [.., n, ..] -> [.., n, step, ..] with g in slot 0 -> [.., n*step, ..]
      Array e = expand_dims(out, static_cast<std::int64_t>(ax) + 1);
      Shape zshape = e.shape();
      zshape[ax + 1] = step - 1;
      Array z = zeros(zshape, g.dtype(), g.device());
      Array inter = concatenate({e, z}, static_cast<std::int64_t>(ax) + 1);
      Shape flat = out.shape();
      flat[ax] = n * step;
      spread = reshape(inter, flat);
    }
    const std::int64_t len = spread.shape()[ax];
    std::vector<Array> parts;
    Shape before = spread.shape();
    before[ax] = start;
    if (start > 0) parts.push_back(zeros(before, g.dtype(), g.device()));
    const std::int64_t keep = std::min(len, full_len - start);
    parts.push_back(keep == len ? spread : slice_axis(spread, static_cast<std::int64_t>(ax), 0, keep));
    Shape after = spread.shape();
    after[ax] = full_len - start - keep;
    if (after[ax] > 0) parts.push_back(zeros(after, g.dtype(), g.device()));
    out = parts.size() == 1 ? parts[0] : concatenate(parts, static_cast<std::int64_t>(ax));
  }
  return out;
}

}  // namespace

Array unbroadcast(const Array& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const std::int64_t lead = g.ndim() - static_cast<std::int64_t>(shape.size());
  Axes axes;
  for (std::int64_t i = 0; i < g.ndim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(i);
  }
  Array s = axes.empty() ? g : sum(g, axes);
  return reshape(s, shape);
}

std::vector<Array> vjp(const Equation& eq, std::span<const Array> in, const Array& y,
                       const Array& g) {
  const Array& x = in.empty() ? y : in[0];
  const DType dt = g.dtype();
  auto ub = [&](const Array& c, std::size_t i) { return unbroadcast(c, in[i].shape()); };
  return visit_prim(eq.prim, [&]<Prim P>(PrimC<P>) -> std::vector<Array> {
    if constexpr (!has_trait(P, PrimTrait::kDifferentiable)) {
      // No float gradient flows through it (comparisons, integer and index
      // results, creation, stop_gradient, bitcast): zero cotangents.
      return std::vector<Array>(in.size());
    } else if constexpr (has_trait(P, PrimTrait::kMath) && family(P) == PrimFamily::kBinary) {
      auto [ga, gb] = MathDef<P>::vjp(in[0], in[1], y, g);  // dsl/unary_math.hpp
      return {ub(ga, 0), ub(gb, 1)};
    } else if constexpr (has_trait(P, PrimTrait::kMath)) {
      return {MathDef<P>::vjp(x, y, g)};  // dsl/unary_math.hpp
    } else if constexpr (P == Prim::kNeg) {
      return {-g};
    } else if constexpr (P == Prim::kAbs) {
      // JAX's rule: g where x >= 0, else -g (1 at 0, not 0; NaN takes -g).
      return {where(x >= 0, g, -g)};
    } else if constexpr (P == Prim::kExp) {
      return {g * y};
    } else if constexpr (P == Prim::kLog) {
      return {g / x};
    } else if constexpr (P == Prim::kTanh) {
      return {g * (1.0 - y * y)};
    } else if constexpr (P == Prim::kSqrt) {
      return {g * 0.5 / y};
    } else if constexpr (P == Prim::kRsqrt) {
      return {g * -0.5 * y / x};
    } else if constexpr (P == Prim::kSigmoid) {
      return {g * y * (1.0 - y)};
    } else if constexpr (P == Prim::kRelu) {
      return {g * as_float(x > 0, dt)};
    } else if constexpr (P == Prim::kAdd) {
      return {ub(g, 0), ub(g, 1)};
    } else if constexpr (P == Prim::kSub) {
      return {ub(g, 0), ub(-g, 1)};
    } else if constexpr (P == Prim::kMul) {
      return {ub(g * in[1], 0), ub(g * in[0], 1)};
    } else if constexpr (P == Prim::kDiv) {
      return {ub(g / in[1], 0), ub(-g * y / in[1], 1)};
    } else if constexpr (P == Prim::kPow) {
      const Array& a = in[0];
      const Array& b = in[1];
      Array da = g * b * power(a, b - 1.0);
      // d/db a^b = a^b log a, taken as 0 where a == 0 (as JAX does).
      Array safe_log = log(where(a == 0.0, ones_like(a), a));
      Array db = g * y * safe_log;
      return {ub(da, 0), ub(db, 1)};
    } else if constexpr (P == Prim::kMaximum || P == Prim::kMinimum) {
      // Ties split the gradient evenly, as JAX does.
      const Array& a = in[0];
      const Array& b = in[1];
      Array wins = P == Prim::kMaximum ? as_float(a > b, dt) : as_float(a < b, dt);
      Array ties = as_float(a == b, dt) * 0.5;
      Array wa = wins + ties;
      return {ub(g * wa, 0), ub(g * (1.0 - wa), 1)};
    } else if constexpr (P == Prim::kWhere) {
      Array zero = zeros_like(g);
      return {Array(), ub(where(in[0], g, zero), 1), ub(where(in[0], zero, g), 2)};
    } else if constexpr (P == Prim::kAstype) {
      return {is_inexact(x.dtype()) ? astype(g, x.dtype()) : Array()};
    } else if constexpr (P == Prim::kSum) {
      return {expand_reduced(g, eq.params, x.shape())};
    } else if constexpr (P == Prim::kProd) {
      // d/dx_i prod(x) = prod of the others, exact at zeros: with no zero in
      // the reduced run it is prod / x_i; with exactly one, only that zero's
      // entry is non-zero (the product of the rest); with more, all are 0.
      const Array zero = zeros_like(x);
      const Array is0 = x == 0.0;
      const Array safe = where(is0, ones_like(x), x);
      const Array count = broadcast_to(sum(as_float(is0, dt), eq.params.as<ReduceParams>().axes, true), x.shape());
      const Array rest = broadcast_to(prod(safe, eq.params.as<ReduceParams>().axes, true), x.shape());
      const Array yb = expand_reduced(y, eq.params, x.shape());
      const Array d = where(count == 0.0, yb / safe,
                            where(logical_and(count == 1.0, is0), rest, zero));
      return {expand_reduced(g, eq.params, x.shape()) * d};
    } else if constexpr (P == Prim::kCumsum) {
      return {cumsum(g, eq.params.as<ScanParams>().axis, !eq.params.as<ScanParams>().reverse)};
    } else if constexpr (P == Prim::kCumprod) {
      // grad_i = sum_{j >= i} g_j * prod_{k <= j, k != i} x_k (j, k in scan
      // order). Exact at zeros, with z_j the zeros among x_0..x_j:
      //   x_i != 0: only z_j == 0 terms survive, each y_j / x_i;
      //   x_i == 0: only z_j == 1 terms survive (x_i the one zero), each the
      //   product of the prefix with the zero taken as 1.
      const auto [axis, rev] = eq.params.as<ScanParams>();
      const Array zero = zeros_like(x);
      const Array is0 = x == 0.0;
      const Array safe = where(is0, ones_like(x), x);
      const Array z = cumsum(as_float(is0, dt), axis, rev);
      const Array nonzero = cumsum(g * where(z == 0.0, y, zero), axis, !rev) / safe;
      const Array prefix = cumprod(safe, axis, rev);
      const Array at_zero = cumsum(g * where(z == 1.0, prefix, zero), axis, !rev);
      return {where(is0, at_zero, nonzero)};
    } else if constexpr (P == Prim::kMax || P == Prim::kMin) {
      // g / count to every maximal element: y, g and the counts stay in the
      // reduced shape and broadcast in the compare and the final product.
      const Axes& axes = eq.params.as<ReduceParams>().axes;
      Shape kept = x.shape();
      for (auto ax : axes) kept[ax] = 1;
      const Array mask = as_float(x == reshape(y, kept), dt);
      return {mask * (reshape(g, kept) / sum(mask, axes, true))};
    } else if constexpr (P == Prim::kMatmul) {
      // y = A @ B with A = op(a), B = op(b) (op: the transpose a flag asks
      // for): dA = g @ B^T and dB = A^T @ g, read through the matmul's flags
      // rather than materialised transposes (an eager step would copy every
      // operand once more), and da = dA or dA^T = B @ g^T (likewise db).
      const auto& mp = eq.params.as<MatmulParams>();
      const bool ta = mp.transpose_a, tb = mp.transpose_b;
      const Array& a = in[0];
      const Array& b = in[1];
      const Array ga = ta ? matmul_flags(b, tb, g, true) : matmul_flags(g, false, b, !tb);
      const Array gb = tb ? matmul_flags(g, true, a, ta) : matmul_flags(a, !ta, g, false);
      return {ub(ga, 0), ub(gb, 1)};
    } else if constexpr (P == Prim::kReshape) {
      return {reshape(g, x.shape())};
    } else if constexpr (P == Prim::kTranspose) {
      const Axes& perm = eq.params.as<TransposeParams>().perm;
      Axes inv(perm.size());
      for (std::size_t i = 0; i < inv.size(); ++i) inv[perm[i]] = static_cast<std::int64_t>(i);
      return {transpose(g, inv)};
    } else if constexpr (P == Prim::kBroadcastTo) {
      return {unbroadcast(g, x.shape())};
    } else if constexpr (P == Prim::kConcatenate) {
      std::vector<Array> out;
      std::int64_t offset = 0;
      for (const Array& part : in) {
        const std::int64_t n = part.shape()[eq.params.as<AxisParams>().axis];
        out.push_back(slice_axis(g, eq.params.as<AxisParams>().axis, offset, offset + n));
        offset += n;
      }
      return out;
    } else if constexpr (P == Prim::kSlice) {
      return {unslice(g, eq.params.as<SliceParams>(), x.shape())};
    } else if constexpr (P == Prim::kUnfold) {
      // Taps in the padding read a constant: only the image's taps get g.
      WindowParams q = eq.params.as<WindowParams>();
      q.pad_value = 0.0;
      const Array gs[] = {g};
      return {detail::bind<Prim::kFold>(std::move(q), gs, Aval{g.dtype(), x.shape()})};
    } else if constexpr (P == Prim::kFold) {
      const Array gs[] = {g};
      return {detail::bind<Prim::kUnfold>(eq.params.as<WindowParams>(), gs,
                                          Aval{g.dtype(), x.shape()})};
    } else if constexpr (P == Prim::kTake) {
      // The transpose of a gather is a scatter_add of g into zeros: O(g) work
      // and memory (a one-hot matmul would be O(indices x axis)).
      return {scatter_add(zeros(x.shape(), dt, g.device()), in[1], g, eq.params.as<AxisParams>().axis), Array()};
    } else if constexpr (P == Prim::kTakeAlongAxis) {
      // Scatter g into the broadcast shape (x's axis length), then sum the
      // axes x broadcast along.
      const Array& idx = in[1];
      const std::int64_t axis = eq.params.as<AxisParams>().axis;
      Shape full = g.shape();
      full[static_cast<std::size_t>(axis)] = x.shape()[static_cast<std::size_t>(axis)];
      Array s = scatter_add_along_axis(zeros(full, dt, g.device()), broadcast_to(idx, g.shape()),
                                       g, axis);
      return {unbroadcast(s, x.shape()), Array()};
    } else if constexpr (P == Prim::kScatterAdd) {
      return {g, Array(), take(g, in[1], eq.params.as<AxisParams>().axis)};
    } else if constexpr (P == Prim::kScatterAddAlongAxis) {
      return {g, Array(), take_along_axis(g, in[1], eq.params.as<AxisParams>().axis)};
    } else if constexpr (P == Prim::kScatter) {
      // An update reaches the result only where no later one overwrote it
      // (the last wins): number the updates, scatter the numbers, and pass g
      // back to the updates whose number survived; the operand keeps g where
      // nothing was written.
      const Array& idx = in[1];
      const Array& upd = in[2];
      const std::int64_t axis = eq.params.as<AxisParams>().axis;
      Array ids = reshape(arange(0, static_cast<double>(upd.size()), 1, DType::kI32, g.device()),
                          upd.shape());
      Array winner = scatter(full(x.shape(), -1, DType::kI32, g.device()), idx, ids, axis);
      Array won = take(winner, idx, axis) == ids;
      Array gu = take(g, idx, axis);
      return {scatter(g, idx, zeros(upd.shape(), dt, g.device()), axis), Array(),
              where(won, gu, zeros_like(gu))};
    } else if constexpr (family(P) == PrimFamily::kControl) {
      // Several results: dsl/control_vjp.cpp (autodiff calls control_vjp).
      throw Error(str_cat("[kiln internal] vjp() of ", name(P), "; use control_vjp"));
    } else {
      static_assert(kUnhandled<P>, "a differentiable primitive without a vjp rule");
    }
  });
}

}  // namespace kiln::detail
