// Scatter kernels: one invocation per (outer, inner) column of the result,
// which applies that column's updates in index order (k ascending). No two
// invocations touch one element, so there are no atomics and the result is
// deterministic, the same bits as the CPU's loop in the same order. The
// result already holds the operand (the backend copies it in first).
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

using spv::Builder;
using spv::Ty;
using spv::Val;

Launch scatter_kernel(Context& ctx, const ScatterSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  // Where the driver caps loop iterations, several updates per iteration.
  std::uint32_t unroll = 1;
  if (const std::uint64_t limit = ctx.quirks().max_loop_iterations; limit > 0) {
    while (static_cast<std::uint64_t>(s.k) > limit * unroll) unroll *= 2;
  }
  std::string key = detail::str_cat("scatter|", s.add ? "add" : "set", s.per_element ? "|elem" : "",
                                    "|", name(s.dtype), "|", name(s.index), "|o=", s.outer,
                                    "|n=", s.n, "|k=", s.k, "|i=", s.inner, "|u", unroll);
  if (addressed != 0) key += detail::str_cat("|addr=", addressed);
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 1, addressed);
    const int idx = b.buffer(s.index, true);
    const int upd = b.buffer(s.dtype, true);
    const int out = b.buffer(s.dtype, false);
    const Val c = b.global_index();
    b.if_then(b.op("OpULessThan", Ty::kBool, {c, b.push(0)}), [&] {
      const Val inner = b.u32(u(s.inner));
      const Val o = b.op("OpUDiv", Ty::kU32, {c, inner});
      const Val q = b.op("OpUMod", Ty::kU32, {c, inner});
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
        const Val dst = b.op("OpIAdd", Ty::kU32, {out_base, b.op("OpIMul", Ty::kU32, {i, inner})});
        Val v = b.load(upd, at);
        if (s.add) {
          const Ty t = spv::compute_type(s.dtype);
          v = b.op(spv::is_float(t) ? "OpFAdd" : "OpIAdd", t, {b.load(out, dst), v});
        }
        b.store(out, dst, v);
      }, unroll);
    });
    return KernelSource{b.finish(), 3, 1, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  Launch l;
  l.pipeline = &p;
  const std::uint64_t columns = static_cast<std::uint64_t>(s.outer) * static_cast<std::uint64_t>(s.inner);
  l.push = {static_cast<std::uint32_t>(columns)};
  l.groups = grid_for(ctx, (columns + local - 1) / local, "scatter");
  return l;
}

}  // namespace kiln::vk
