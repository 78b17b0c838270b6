// Reverse-mode rules of the control-flow primitives, in the DSL: the backward
// pass of a scan is a scan running the other way, of a cond a cond over the
// branches' backward passes, so grad inside filter_jit records one loop, not
// one copy per iteration. Each iteration's (branch's, checkpointed call's)
// forward values are recomputed from its inputs in the backward pass; a scan
// keeps only its carries per iteration (with_residuals).
#include "kiln/dsl/autodiff.hpp"
#include "kiln/dsl/control.hpp"
#include "kiln/dsl/control_run.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {
namespace {

Array or_zeros(const Array& ct, const Aval& a, Device d) {
  return ct.is_null() ? zeros(a.shape, a.dtype, d) : ct;
}

std::vector<Aval> input_avals(const Program& p, std::size_t from = 0) {
  std::vector<Aval> out;
  for (std::size_t i = from; i < p.inputs.size(); ++i) out.push_back(p.avals[p.inputs[i]]);
  return out;
}

std::vector<Array> scan_vjp(const ScanLoopParams& q, std::span<const Array> in,
                            std::span<const Array> out, std::span<const Array> cts) {
  if (!q.save_carries) {
    throw Error("[kiln internal] the vjp of a scan that did not save its carries");
  }
  const Program& body = *q.body;
  const auto nc = static_cast<std::size_t>(q.num_consts);
  const auto ncarry = static_cast<std::size_t>(q.num_carry);
  const std::size_t nx = in.size() - nc - ncarry;
  const std::size_t ny = out.size() - 2 * ncarry;
  const Device device = device_of(in);
  const std::vector<Aval> body_in = input_avals(body);
  // Backward body: (consts, acc, ct_carry, carry_t, x_t, ct_y_t) ->
  //                (acc + ct_consts_t, ct_carry_t-1, ct_x_t).
  std::vector<Aval> avals(body_in.begin(), body_in.begin() + static_cast<std::ptrdiff_t>(nc));
  avals.insert(avals.end(), body_in.begin(),
               body_in.begin() + static_cast<std::ptrdiff_t>(nc + ncarry));
  avals.insert(avals.end(), body_in.begin() + static_cast<std::ptrdiff_t>(nc), body_in.end());
  for (std::size_t j = 0; j < ny; ++j) avals.push_back(body.avals[body.outputs[ncarry + j]]);
  auto bwd = [&](std::span<const Array> t) {
    const std::span<const Array> consts = t.first(nc), acc = t.subspan(nc, nc),
                                 ct_carry = t.subspan(2 * nc, ncarry),
                                 carry_t = t.subspan(2 * nc + ncarry, ncarry),
                                 x_t = t.subspan(2 * nc + 2 * ncarry, nx),
                                 ct_y = t.subspan(2 * nc + 2 * ncarry + nx, ny);
    std::vector<Array> primal(consts.begin(), consts.end());
    primal.insert(primal.end(), carry_t.begin(), carry_t.end());
    primal.insert(primal.end(), x_t.begin(), x_t.end());
    std::vector<Array> out_ct(ct_carry.begin(), ct_carry.end());
    out_ct.insert(out_ct.end(), ct_y.begin(), ct_y.end());
    const std::vector<Array> g = pull_back_program(body, primal, out_ct);
    std::vector<Array> r;
    for (std::size_t i = 0; i < nc; ++i) r.push_back(acc[i] + g[i]);
    r.insert(r.end(), g.begin() + static_cast<std::ptrdiff_t>(nc), g.end());
    return r;
  };
  ClosedBody b = trace_body("scan (backward)", bwd, avals, device, {});
  // The forward consts are the backward scan's consts (after its own closure).
  b.hoisted.insert(b.hoisted.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nc));
  std::vector<Array> init;
  for (std::size_t i = 0; i < nc; ++i)
    init.push_back(zeros(body_in[i].shape, body_in[i].dtype, device));
  for (std::size_t j = 0; j < ncarry; ++j) init.push_back(or_zeros(cts[j], out[j].aval(), device));
  std::vector<Array> xs(out.begin() + static_cast<std::ptrdiff_t>(ncarry + ny), out.end());
  xs.insert(xs.end(), in.begin() + static_cast<std::ptrdiff_t>(nc + ncarry), in.end());
  for (std::size_t j = 0; j < ny; ++j)
    xs.push_back(or_zeros(cts[ncarry + j], out[ncarry + j].aval(), device));
  // A zero-length scan has nothing to pull back through.
  if (q.length == 0) {
    std::vector<Array> r = init;
    for (std::size_t k = 0; k < nx; ++k) r.push_back(zeros_like(in[nc + ncarry + k]));
    return r;
  }
  return scan_flat(b, init, xs, q.length, !q.reverse);
}

std::vector<Array> cond_vjp(const CondParams& q, std::span<const Array> in,
                            std::span<const Array> out, std::span<const Array> cts) {
  const Device device = device_of(in);
  const std::span<const Array> operands = in.subspan(1);
  std::vector<Array> filled;
  for (std::size_t j = 0; j < out.size(); ++j)
    filled.push_back(or_zeros(cts[j], out[j].aval(), device));
  std::vector<Aval> avals;
  for (const Array& a : operands) avals.push_back(a.aval());
  for (const Array& a : filled) avals.push_back(a.aval());
  std::vector<ClosedBody> branches;
  for (const ProgramRef& branch : q.branches) {
    auto bwd = [&](std::span<const Array> t) {
      return pull_back_program(*branch, t.first(operands.size()), t.subspan(operands.size()));
    };
    branches.push_back(trace_body("cond (backward)", bwd, avals, device, {}));
  }
  std::vector<Array> r{Array()};  // the index has no cotangent
  const std::vector<Array> g = switch_flat(in[0], branches, [&] {
    std::vector<Array> ops(operands.begin(), operands.end());
    ops.insert(ops.end(), filled.begin(), filled.end());
    return ops;
  }());
  r.insert(r.end(), g.begin(), g.end());
  return r;
}

}  // namespace

std::vector<Array> control_vjp(const Equation& eq, std::span<const Array> in,
                               std::span<const Array> out, std::span<const Array> cts) {
  return visit_family<PrimFamily::kControl>(eq.prim, [&]<Prim P>(PrimC<P>) -> std::vector<Array> {
    const auto& q = eq.params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kScanLoop) {
      return scan_vjp(q, in, out, cts);
    } else if constexpr (P == Prim::kCond) {
      return cond_vjp(q, in, out, cts);
    } else if constexpr (P == Prim::kCall) {
      // Recomputes the body's forward values (checkpoint: they were not kept).
      return pull_back_program(*q.body, in, cts);
    } else if constexpr (P == Prim::kCustomVjp) {
      const std::vector<Array> fw = eval(*q.fwd, in);
      std::vector<Array> args(fw.begin() + static_cast<std::ptrdiff_t>(out.size()), fw.end());
      for (std::size_t j = 0; j < out.size(); ++j) {
        args.push_back(or_zeros(cts[j], out[j].aval(), device_of(in)));
      }
      return eval(*q.bwd, args);
    } else if constexpr (P == Prim::kWhileLoop) {
      throw ValueError(
          "[while_loop] reverse-mode differentiation through a while_loop is not supported: its "
          "trip count is known only at run time. Use fori_loop with static bounds or scan with a "
          "fixed length (both differentiable), or stop_gradient the loop's result");
    } else {
      static_assert(kUnhandled<P>, "a control primitive without a vjp rule");
    }
  });
}

}  // namespace kiln::detail
