// Column kernels: an array viewed as (outer, n, inner) and one invocation per
// (outer, inner) column, which walks its column in order. No two invocations
// touch one element, so there are no atomics and results are deterministic:
// the same bits as the CPU's loops, which run in the same order.
//   - scatters apply a column's updates in index order (k ascending) to the
//     result, which already holds the operand (a parallel copy before);
//   - scans (cumsum, cumprod) accumulate down the column, or up it.
#include <algorithm>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

using spv::Builder;
using spv::Ty;
using spv::Val;

namespace {

// Where the driver caps loop iterations, several steps per iteration.
std::uint32_t loop_unroll(const Context& ctx, std::int64_t trips) {
  std::uint32_t unroll = 1;
  if (const std::uint64_t limit = ctx.quirks().max_loop_iterations; limit > 0) {
    while (static_cast<std::uint64_t>(trips) > limit * unroll) unroll *= 2;
  }
  return unroll;
}

// One invocation per column; push word 0 is the column count.
Launch column_launch(const Context& ctx, const Pipeline& p, std::int64_t outer,
                     std::int64_t inner, const char* what) {
  Launch l;
  l.pipeline = &p;
  const std::uint64_t columns = static_cast<std::uint64_t>(outer) * static_cast<std::uint64_t>(inner);
  l.push = {static_cast<std::uint32_t>(columns)};
  l.groups = grid_for(ctx, (columns + local_size(ctx) - 1) / local_size(ctx), what);
  return l;
}

}  // namespace

Launch scatter_kernel(Context& ctx, const ScatterSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const std::uint32_t unroll = loop_unroll(ctx, s.k);
  // The result's rows split into blocks, one invocation per (column, block):
  // each walks all k updates in order and applies those that land in its
  // block, so an element still takes its updates in index order (the same bits
  // as one walk per column), and a few wide columns (an embedding table's
  // gradient: 64 columns, 8192 updates) still fill a GPU.
  const std::int64_t columns = std::max<std::int64_t>(s.outer * s.inner, 1);
  const std::int64_t want = std::clamp<std::int64_t>(ctx.caps().parallel_invocations / columns, 1,
                                                     std::max<std::int64_t>(s.n, 1));
  const std::int64_t rows = (s.n + want - 1) / want;              // per block
  const std::int64_t blocks = rows == 0 ? 1 : (s.n + rows - 1) / rows;
  std::string key = detail::str_cat("scatter|", s.add ? "add" : "set", s.per_element ? "|elem" : "",
                                    "|", name(s.dtype), "|", name(s.index), "|o=", s.outer,
                                    "|n=", s.n, "|k=", s.k, "|i=", s.inner, "|b=", blocks, "x",
                                    rows, "|u", unroll);
  if (addressed != 0) key += detail::str_cat("|addr=", addressed);
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 1, addressed);
    const int idx = b.buffer(s.index, true);
    const int upd = b.buffer(s.dtype, true);
    const int out = b.buffer(s.dtype, false);
    // The result is read back by the invocation that wrote it, after the
    // copy kernel wrote it. Without Coherent NVIDIA's driver (H100, 580)
    // served those loads from a cache that the stores had not updated: sums
    // started from the memory's old contents. An addressed binding is
    // not a variable to decorate; there a device-scope memory barrier after
    // each store does the same (both measured correct on the H100).
    const bool fence = b.addressed(out);
    if (!fence) b.decorate_binding(out, "Coherent");
    const Val c = b.global_index();
    b.if_then(b.op("OpULessThan", Ty::kBool, {c, b.push(0)}), [&] {
      // c = (o * blocks + block) * inner + q: neighbouring lanes, neighbouring columns.
      const Val inner = b.u32(u(s.inner));
      const Val q = b.op("OpUMod", Ty::kU32, {c, inner});
      const Val ob = b.op("OpUDiv", Ty::kU32, {c, inner});
      const Val o = b.op("OpUDiv", Ty::kU32, {ob, b.u32(u(blocks))});
      const Val lo = b.op("OpIMul", Ty::kU32, {b.op("OpUMod", Ty::kU32, {ob, b.u32(u(blocks))}), b.u32(u(rows))});
      // The column's first element in the result and in the updates.
      const Val out_base = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {o, b.u32(u(s.n * s.inner))}), q});
      const Val upd_base = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {o, b.u32(u(s.k * s.inner))}), q});
      b.loop(b.u32(0), b.u32(u(s.k)), b.u32(1), [&](const Val& k) {
        const Val at = b.op("OpIAdd", Ty::kU32, {upd_base, b.op("OpIMul", Ty::kU32, {k, inner})});
        Val i = b.load(idx, s.per_element ? at : k);
        if (spv::is_signed(i.ty)) {  // [-n, n) -> [0, n)
          const Val neg = b.op("OpSLessThan", Ty::kBool, {i, b.constant(Ty::kI32, 0)});
          const Val w = b.bitcast(i, Ty::kU32);
          i = b.select(neg, b.op("OpIAdd", Ty::kU32, {w, b.u32(u(s.n))}), w);
        }
        // i - lo < rows, unsigned: in this block (rows below lo wrap high);
        // and i < n (an index out of range, which a compiled program's device
        // check reports later, is dropped).
        const Val in_block = b.op(
            "OpLogicalAnd", Ty::kBool,
            {b.op("OpULessThan", Ty::kBool, {b.op("OpISub", Ty::kU32, {i, lo}), b.u32(u(rows))}),
             b.op("OpULessThan", Ty::kBool, {i, b.u32(u(s.n))})});
        b.if_then(in_block, [&] {
          const Val dst = b.op("OpIAdd", Ty::kU32, {out_base, b.op("OpIMul", Ty::kU32, {i, inner})});
          Val v = b.load(upd, at);
          if (s.add) {
            const Ty t = spv::compute_type(s.dtype);
            v = b.op(spv::is_float(t) ? "OpFAdd" : "OpIAdd", t, {b.load(out, dst), v});
          }
          b.store(out, dst, v);
          if (fence) b.memory_barrier();
        });
      }, unroll);
    });
    return KernelSource{b.finish(), 3, 1, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  return column_launch(ctx, p, s.outer * blocks, s.inner, "scatter");
}

Launch index_check_kernel(Context& ctx, DType index, std::int64_t n, std::int64_t count,
                          std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  std::string key = detail::str_cat("index_check|", name(index), "|n=", n);
  if (addressed != 0) key += detail::str_cat("|addr=", addressed);
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 1, addressed);
    const int idx = b.buffer(index, true);
    const int fault = b.buffer(DType::kU32, false);
    const Val e = b.global_index();
    b.if_then(b.op("OpULessThan", Ty::kBool, {e, b.push(0)}), [&] {
      const Val i = b.load(idx, e);
      Val bad;
      if (spv::is_signed(i.ty)) {  // outside [-n, n)
        bad = b.op("OpLogicalOr", Ty::kBool,
                   {b.op("OpSLessThan", Ty::kBool, {i, b.constant(Ty::kI32, -static_cast<double>(n))}),
                    b.op("OpSGreaterThanEqual", Ty::kBool, {i, b.constant(Ty::kI32, static_cast<double>(n))})});
      } else {
        bad = b.op("OpUGreaterThanEqual", Ty::kBool, {i, b.u32(static_cast<std::uint32_t>(n))});
      }
      b.if_then(bad, [&] {
        // Racing writers all write a faulty value: any one of them is reported.
        b.store(fault, b.u32(0), b.u32(1));
        b.store(fault, b.u32(1), b.bitcast(i, Ty::kU32));
      });
    });
    return KernelSource{b.finish(), 2, 1, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  Launch l;
  l.pipeline = &p;
  l.push = {static_cast<std::uint32_t>(count)};
  l.groups = grid_for(ctx, (static_cast<std::uint64_t>(count) + local - 1) / local, "index check");
  return l;
}

Launch scan_kernel(Context& ctx, const ScanSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const std::uint32_t unroll = loop_unroll(ctx, s.n);
  std::string key = detail::str_cat("scan|", name(s.op), s.reverse ? "|rev" : "", "|",
                                    name(s.dtype), "|o=", s.outer, "|n=", s.n, "|i=", s.inner,
                                    "|u", unroll);
  if (addressed != 0) key += detail::str_cat("|addr=", addressed);
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 1, addressed);
    const int in = b.buffer(s.dtype, true);
    const int out = b.buffer(s.dtype, false);
    const Ty t = spv::compute_type(s.dtype);
    const Val c = b.global_index();
    b.if_then(b.op("OpULessThan", Ty::kBool, {c, b.push(0)}), [&] {
      const Val inner = b.u32(u(s.inner));
      const Val o = b.op("OpUDiv", Ty::kU32, {c, inner});
      const Val q = b.op("OpUMod", Ty::kU32, {c, inner});
      const Val base = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {o, b.u32(u(s.n * s.inner))}), q});
      spv::Var acc = b.variable(t);
      const Prim combine = visit_family<PrimFamily::kScan>(s.op, []<Prim P>(PrimC<P>) {
        if constexpr (P == Prim::kCumsum) {
          return Prim::kAdd;
        } else if constexpr (P == Prim::kCumprod) {
          return Prim::kMul;
        } else {
          static_assert(kUnhandled<P>, "a scan without a Vulkan combine");
        }
      });
      b.set(acc, b.constant(t, combine == Prim::kMul ? 1 : 0));
      b.loop(b.u32(0), b.u32(u(s.n)), b.u32(1), [&](const Val& step) {
        const Val j = s.reverse ? b.op("OpISub", Ty::kU32, {b.u32(u(s.n - 1)), step}) : step;
        const Val at = b.op("OpIAdd", Ty::kU32, {base, b.op("OpIMul", Ty::kU32, {j, inner})});
        const Val args[] = {b.get(acc), b.load(in, at)};
        // The first element is taken as it is (the CPU copies it), not
        // combined with the identity: 0 + -0.0 would give +0.0.
        const Val first = b.op("OpIEqual", Ty::kBool, {step, b.u32(0)});
        const Val next = b.select(first, args[1],
                                  emit_elementwise(b, combine, Params{}, args, s.dtype, s.dtype));
        b.set(acc, next);
        b.store(out, at, next);
      }, unroll);
    });
    return KernelSource{b.finish(), 2, 1, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  return column_launch(ctx, p, s.outer, s.inner, "scan");
}

}  // namespace kiln::vk
