// Binding and running the control-flow primitives.
#include "kiln/dsl/control_run.hpp"

#include <algorithm>
#include <cstdlib>

#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/control.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace detail {

void control_reached_backend(Prim p) {
  throw Error(str_cat("[kiln internal] ", name(p),
                      " reached a backend's eval; control flow runs in dsl/control_run.cpp"));
}

std::vector<ProgramRef> sub_programs(Prim p, const Params& params) {
  return visit_family<PrimFamily::kControl>(p, [&]<Prim P>(PrimC<P>) -> std::vector<ProgramRef> {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kScanLoop || P == Prim::kCall) {
      return {q.body};
    } else if constexpr (P == Prim::kWhileLoop) {
      return {q.cond, q.body, q.step};
    } else if constexpr (P == Prim::kCond) {
      return q.branches;
    } else if constexpr (P == Prim::kCustomVjp) {
      return {q.primal};
    } else {
      static_assert(kUnhandled<P>, "a control primitive without its sub-programs");
    }
  });
}

namespace {

// x[t] along the leading axis, as a take at an index that is data: a device
// backend compiles one kernel for every t (a slice would bake t into its
// kernel, one compile per iteration on the first call).
Array index_lead(const Array& x, const Array& t) { return take(x, t, 0); }

Array index_array(std::size_t t, Device device) {
  const auto v = static_cast<std::int32_t>(t);
  return to_device(Array::from_data<std::int32_t>(std::span<const std::int32_t>(&v, 1), {}),
                   device);
}

// Per-iteration values stacked along a new leading axis (position t at t).
// Concatenated 8 at a time, level by level: the pieces' offsets (baked into
// a device's copy kernels) take at most 8 values per level, so stacking T
// values compiles O(8 log8 T) kernels rather than T, for log8 T copies.
Array stack_lead(std::vector<Array>& parts, const Aval& aval, Device device) {
  if (parts.empty()) return zeros(aval.shape, aval.dtype, device);
  constexpr std::size_t kGroup = 8;
  std::vector<Array> level;
  level.reserve(parts.size());
  for (const Array& p : parts) level.push_back(expand_dims(p, 0));
  while (level.size() > 1) {
    std::vector<Array> next;
    for (std::size_t i = 0; i < level.size(); i += kGroup) {
      const std::size_t n = std::min(kGroup, level.size() - i);
      next.push_back(n == 1 ? level[i]
                            : concatenate(std::span<const Array>(level).subspan(i, n), 0));
    }
    level = std::move(next);
  }
  return level.front();
}

std::vector<Array> run_scan(const ScanLoopParams& q, std::span<const Array> in,
                            std::span<const Aval> outs, RunBody run) {
  const auto nc = static_cast<std::size_t>(q.num_consts);
  const auto ncarry = static_cast<std::size_t>(q.num_carry);
  const std::span<const Array> consts = in.first(nc);
  std::vector<Array> carry(in.begin() + static_cast<std::ptrdiff_t>(nc),
                           in.begin() + static_cast<std::ptrdiff_t>(nc + ncarry));
  const std::span<const Array> xs = in.subspan(nc + ncarry);
  const std::size_t ny = outs.size() - ncarry - (q.save_carries ? ncarry : 0);
  const auto n = static_cast<std::size_t>(q.length);
  std::vector<std::vector<Array>> ys(ny, std::vector<Array>(n));
  std::vector<std::vector<Array>> saved(q.save_carries ? ncarry : 0, std::vector<Array>(n));
  const Device device = device_of(in);
  std::vector<Array> args;
  for (std::size_t it = 0; it < n; ++it) {
    const std::size_t t = q.reverse ? n - 1 - it : it;
    const Array at = xs.empty() ? Array() : index_array(t, device);
    args.assign(consts.begin(), consts.end());
    for (std::size_t j = 0; j < saved.size(); ++j) saved[j][t] = carry[j];
    // Moved, not copied: a carry nobody else holds can be updated in place.
    args.insert(args.end(), std::make_move_iterator(carry.begin()),
                std::make_move_iterator(carry.end()));
    for (const Array& x : xs) args.push_back(index_lead(x, at));
    std::vector<Array> r = run(0, std::move(args));
    for (std::size_t j = 0; j < ncarry; ++j) carry[j] = std::move(r[j]);
    for (std::size_t j = 0; j < ny; ++j) ys[j][t] = std::move(r[ncarry + j]);
  }
  std::vector<Array> result = std::move(carry);
  for (std::size_t j = 0; j < ny; ++j)
    result.push_back(stack_lead(ys[j], outs[ncarry + j], device));
  for (std::size_t j = 0; j < saved.size(); ++j) {
    result.push_back(stack_lead(saved[j], outs[ncarry + ny + j], device));
  }
  return result;
}

bool read_flag(const Array& a) { return astype(a, DType::kI32).item<std::int32_t>() != 0; }

// How many iterations a while loop runs between reads of its condition. The
// CPU reads for free: 1. A device pays a submit and a wait per read, so the
// loop runs batches of 1, 2, 4, ... up to 32 guarded iterations (the step
// program: next = go ? body(carry) : carry, go = go && cond(next)) and reads
// the condition once per batch; iterations after it turned false change
// nothing.
// KILN_WHILE_MAX_BATCH overrides the device's 32 (1: read after every
// iteration; bench/rnn_scan.cpp measures both).
std::size_t max_batch(Device d) {
  if (d == Device::cpu()) return 1;
  static const std::size_t most =
      static_cast<std::size_t>(env::count("KILN_WHILE_MAX_BATCH").value_or(32));
  return most;
}

std::vector<Array> run_while(const WhileParams& q, std::span<const Array> in, RunBody run) {
  const auto ncc = static_cast<std::size_t>(q.num_cond_consts);
  const auto nbc = static_cast<std::size_t>(q.num_body_consts);
  const std::span<const Array> cc = in.first(ncc), bc = in.subspan(ncc, nbc);
  std::vector<Array> carry(in.begin() + static_cast<std::ptrdiff_t>(ncc + nbc), in.end());
  auto cond = [&](const std::vector<Array>& c) {
    std::vector<Array> args(cc.begin(), cc.end());
    args.insert(args.end(), c.begin(), c.end());
    return run(0, std::move(args))[0];
  };
  auto body = [&](const std::vector<Array>& c) {
    std::vector<Array> args(bc.begin(), bc.end());
    args.insert(args.end(), c.begin(), c.end());
    return run(1, std::move(args));
  };
  // One guarded iteration (the step program: fused, compiled once).
  auto step = [&](Array go) {
    std::vector<Array> args(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(ncc + nbc));
    args.push_back(std::move(go));
    args.insert(args.end(), std::make_move_iterator(carry.begin()),
                std::make_move_iterator(carry.end()));
    std::vector<Array> r = run(2, std::move(args));
    carry.assign(std::make_move_iterator(r.begin() + 1), std::make_move_iterator(r.end()));
    return std::move(r[0]);
  };
  Array go = cond(carry);
  const std::size_t most = max_batch(device_of(in));
  std::size_t batch = 1;
  while (read_flag(go)) {
    if (most == 1) {
      carry = body(carry);
      go = cond(carry);
      continue;
    }
    for (std::size_t k = 0; k < batch; ++k) go = step(std::move(go));
    batch = std::min(batch * 2, most);
  }
  return carry;
}

std::vector<Array> run_cond(const CondParams& q, std::span<const Array> in, RunBody run) {
  const std::int64_t n = static_cast<std::int64_t>(q.branches.size());
  const std::int64_t k =
      std::clamp<std::int64_t>(astype(in[0], DType::kI32).item<std::int32_t>(), 0, n - 1);
  return run(static_cast<std::size_t>(k), std::vector<Array>(in.begin() + 1, in.end()));
}

}  // namespace

std::vector<Array> run_control(Prim p, const Params& params, std::span<const Array> inputs,
                               std::span<const Aval> outs, RunBody run) {
  return visit_family<PrimFamily::kControl>(p, [&]<Prim P>(PrimC<P>) -> std::vector<Array> {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kScanLoop) {
      return run_scan(q, inputs, outs, run);
    } else if constexpr (P == Prim::kWhileLoop) {
      return run_while(q, inputs, run);
    } else if constexpr (P == Prim::kCond) {
      return run_cond(q, inputs, run);
    } else if constexpr (P == Prim::kCall || P == Prim::kCustomVjp) {
      return run(0, std::vector<Array>(inputs.begin(), inputs.end()));
    } else {
      static_assert(kUnhandled<P>, "a control primitive without a run rule");
    }
  });
}

std::vector<Array> bind_multi(Prim p, const Params& params, std::span<const Array> inputs,
                              std::span<const Aval> outs) {
  if (params.index() != info(p).params) wrong_params(params.index(), info(p).params);
  if (family(p) != PrimFamily::kControl) {
    throw Error(str_cat("[kiln internal] bind_multi of ", name(p), ", which has one result"));
  }
  Trace* trace = current_trace();
  check_bind_inputs(p, inputs, trace != nullptr);
  if (trace != nullptr) return trace->record_multi(p, params, inputs, outs);
  (void)eager_device(p, inputs, Device{});
  const std::vector<ProgramRef> subs = sub_programs(p, params);
  std::vector<Array> results =
      run_control(p, params, inputs, outs,
                  [&](std::size_t k, std::vector<Array> args) { return eval(*subs[k], args); });
  return results;
}

Program with_residuals(const Program& p) {
  Program q = p;
  for (Equation& eq : q.equations) {
    if (eq.prim != Prim::kScanLoop) continue;
    ScanLoopParams s = eq.params.as<ScanLoopParams>();
    if (s.save_carries) continue;
    s.save_carries = true;
    const std::vector<Aval> outs = scan_output_avals(s);
    for (std::size_t j = outs.size() - static_cast<std::size_t>(s.num_carry); j < outs.size();
         ++j) {
      eq.more_outputs.push_back(q.new_value(outs[j]));
    }
    eq.params = Params(std::move(s));
  }
  return q;
}

}  // namespace detail
}  // namespace kiln
