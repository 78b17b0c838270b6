// argsort as a bitonic sorting network over (key, index) pairs: each line of
// the array (its elements along the axis) is padded to a power of two m and
// sorted by three kinds of kernel:
//   - keys: the line's values mapped to u32 keys whose unsigned order is the
//     sort order (floats by their bits with the sign folded, NaN largest,
//     -0.0 as 0.0; i32 with the sign bit flipped; descending: the keys
//     inverted), and their indices; padding gets key 0xffffffff and an index
//     past the line, so it sorts last;
//   - passes: one compare-exchange step of the network per dispatch (push
//     words j and k), for the steps whose partners are a chunk or more apart;
//   - local passes: every step whose partners lie within one chunk of
//     sort_chunk() elements runs in one dispatch, each workgroup sorting its
//     chunk in shared memory (all steps of k <= chunk first, then the tail
//     j < chunk of each larger k): 1 + sum over k > chunk of log2(k / chunk) + 1
//     dispatches instead of log2(m) (log2(m) + 1) / 2 (55 for 2^20 against 210);
//   - result: the first n indices of each line, where the result wants them.
// Comparing (key, index) makes every pair distinct, so the network's result is
// the stable order: the CPU's std::stable_sort gives the same indices.
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

using spv::Builder;
using spv::Ty;
using spv::Val;

namespace {

Launch launch_for(const Context& ctx, const Pipeline& p, std::uint64_t items, const char* what) {
  Launch l;
  l.pipeline = &p;
  l.push = {static_cast<std::uint32_t>(items)};
  l.groups = grid_for(ctx, (items + local_size(ctx) - 1) / local_size(ctx), what);
  return l;
}

// The element of the (outer, n, inner) input for (line, pos): line = o * inner + q.
Val element_offset(Builder& b, const Val& line, const Val& pos, const SortSpec& s) {
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const Val inner = b.u32(u(s.inner));
  const Val o = b.op("OpUDiv", Ty::kU32, {line, inner});
  const Val q = b.op("OpUMod", Ty::kU32, {line, inner});
  const Val row = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {o, b.u32(u(s.n))}), pos});
  return b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {row, inner}), q});
}

// A value's u32 sort key (ascending).
Val sort_key(Builder& b, const Val& v) {
  switch (v.ty) {
    case Ty::kBool:
      return b.select(v, b.u32(1), b.u32(0));
    case Ty::kU32:
      return v;
    case Ty::kI32:
      return b.op("OpBitwiseXor", Ty::kU32, {b.bitcast(v, Ty::kU32), b.u32(0x80000000u)});
    default: {  // f32 (f16 loads as f32)
      const Val zero = b.constant(Ty::kF32, 0);
      const Val canon = b.select(b.op("OpFOrdEqual", Ty::kBool, {v, zero}), zero, v);
      const Val bits = b.bitcast(canon, Ty::kU32);
      const Val neg = b.op("OpSLessThan", Ty::kBool, {b.bitcast(canon, Ty::kI32), b.constant(Ty::kI32, 0)});
      const Val key = b.select(neg, b.op("OpNot", Ty::kU32, {bits}),
                               b.op("OpBitwiseOr", Ty::kU32, {bits, b.u32(0x80000000u)}));
      return b.select(b.op("OpIsNan", Ty::kBool, {v}), b.u32(0xffffffffu), key);
    }
  }
}

// Pair t of a step whose partners are j apart: its lower element's offset
// (t's bits above j moved up one place, a zero bit inserted at j).
Val pair_low(Builder& b, const Val& t, const Val& j) {
  const Val mask = b.op("OpISub", Ty::kU32, {j, b.u32(1)});
  const Val hi_bits = b.op("OpBitwiseAnd", Ty::kU32, {t, b.op("OpNot", Ty::kU32, {mask})});
  return b.op("OpBitwiseOr", Ty::kU32, {b.op("OpShiftLeftLogical", Ty::kU32, {hi_bits, b.u32(1)}),
                                        b.op("OpBitwiseAnd", Ty::kU32, {t, mask})});
}

// One compare-exchange of the network on the (key, index) pairs at lo and hi
// (through `load`/`store` of array 0 = keys, 1 = indices): ascending where the
// lower element's position in its line has bit k clear; the index breaks ties.
template <class Load, class Store>
void compare_exchange(Builder& b, const Val& lo, const Val& hi, const Val& pos_in_line, const Val& k,
                      Load load, Store store) {
  const Val ascending =
      b.op("OpIEqual", Ty::kBool, {b.op("OpBitwiseAnd", Ty::kU32, {pos_in_line, k}), b.u32(0)});
  const Val ka = load(0, lo), kb = load(0, hi);
  const Val ia = load(1, lo), ib = load(1, hi);
  const Val greater = b.op(
      "OpLogicalOr", Ty::kBool,
      {b.op("OpUGreaterThan", Ty::kBool, {ka, kb}),
       b.op("OpLogicalAnd", Ty::kBool,
            {b.op("OpIEqual", Ty::kBool, {ka, kb}), b.op("OpUGreaterThan", Ty::kBool, {ia, ib})})});
  b.if_then(b.op("OpLogicalEqual", Ty::kBool, {greater, ascending}), [&] {
    store(0, lo, kb);
    store(0, hi, ka);
    store(1, lo, ib);
    store(1, hi, ia);
  });
}

}  // namespace

namespace {
std::string shape_key(const SortSpec& s, std::uint32_t addressed) {
  return detail::str_cat("|n=", s.n, "|m=", s.m, "|i=", s.inner, "|l=", s.lines, "|addr=", addressed);
}
}  // namespace

// keys: bindings input, keys, indices; one invocation per padded element.
Launch sort_keys_kernel(Context& ctx, const SortSpec& s, std::uint32_t addressed) {
  if (s.dtype == DType::kF64) {
    throw DTypeError(detail::str_cat("[argsort] f64 keys are not supported on ",
                                     ctx.device().to_string(), "; astype to f32 or use the cpu device"));
  }
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  {
    std::string key = detail::str_cat("sort.keys|", name(s.dtype), s.descending ? "|desc" : "",
                                      shape_key(s, addressed));
    const Pipeline& p = ctx.pipelines().get(key, [&] {
      Builder b(local, 1, addressed);
      const int in = b.buffer(s.dtype, true);
      const int keys = b.buffer(DType::kU32, false);
      const int idx = b.buffer(DType::kU32, false);
      const Val e = b.global_index();
      b.if_then(b.op("OpULessThan", Ty::kBool, {e, b.push(0)}), [&] {
        const Val m = b.u32(u(s.m));
        const Val line = b.op("OpUDiv", Ty::kU32, {e, m});
        const Val pos = b.op("OpUMod", Ty::kU32, {e, m});
        const Val real = b.op("OpULessThan", Ty::kBool, {pos, b.u32(u(s.n))});
        b.store(keys, e, b.u32(0xffffffffu));
        b.store(idx, e, pos);
        b.if_then(real, [&] {
          Val k = sort_key(b, b.load(in, element_offset(b, line, pos, s)));
          if (s.descending) k = b.op("OpNot", Ty::kU32, {k});
          b.store(keys, e, k);
        });
      });
      return KernelSource{b.finish(), 3, 1, 0, VK_FORMAT_UNDEFINED, addressed};
    });
    return launch_for(ctx, p, static_cast<std::uint64_t>(s.lines) * static_cast<std::uint64_t>(s.m),
                      "argsort");
  }
}

// passes: bindings keys, indices (read and written); push: pairs, j, k.
Launch sort_pass_kernel(Context& ctx, const SortSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  {
    const std::string key = detail::str_cat("sort.pass", shape_key(s, addressed));
    const Pipeline& p = ctx.pipelines().get(key, [&] {
      Builder b(local, 3, addressed);
      const int keys = b.buffer(DType::kU32, false);
      const int idx = b.buffer(DType::kU32, false);
      const Val t = b.global_index();
      b.if_then(b.op("OpULessThan", Ty::kBool, {t, b.push(0)}), [&] {
        const Val j = b.push(1);
        const Val k = b.push(2);
        const Val half = b.u32(u(s.m / 2));
        const Val line = b.op("OpUDiv", Ty::kU32, {t, half});
        const Val low_in_line = pair_low(b, b.op("OpUMod", Ty::kU32, {t, half}), j);
        const Val lo = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {line, b.u32(u(s.m))}), low_in_line});
        const int arrays[] = {keys, idx};
        compare_exchange(
            b, lo, b.op("OpIAdd", Ty::kU32, {lo, j}), low_in_line, k,
            [&](int a, const Val& at) { return b.load(arrays[a], at); },
            [&](int a, const Val& at, const Val& v) { b.store(arrays[a], at, v); });
      });
      return KernelSource{b.finish(), 2, 3, 0, VK_FORMAT_UNDEFINED, addressed};
    });
    return launch_for(ctx, p, static_cast<std::uint64_t>(s.lines) * static_cast<std::uint64_t>(s.m / 2),
                      "argsort");
  }
}

std::int64_t sort_chunk(const Context& ctx, const SortSpec& s) {
  // Pairs of u32 (key, index) in shared memory: up to 4 compare-exchanges per
  // invocation a step, within half the device's shared memory.
  std::int64_t c = 2 * static_cast<std::int64_t>(local_size(ctx));
  while (c < 8 * static_cast<std::int64_t>(local_size(ctx)) &&
         c * 2 * 8 <= static_cast<std::int64_t>(ctx.caps().max_shared_memory) / 2) {
    c *= 2;
  }
  return std::min(c, s.m);
}

// local passes: bindings keys, indices; push: log2 of the first k, of the first
// step's j, of the last k. One workgroup per chunk.
Launch sort_local_kernel(Context& ctx, const SortSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const std::int64_t chunk = sort_chunk(ctx, s);
  const std::int64_t pairs = chunk / 2;
  const std::string key = detail::str_cat("sort.local|c=", chunk, shape_key(s, addressed));
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 3, addressed);
    const int keys = b.buffer(DType::kU32, false);
    const int idx = b.buffer(DType::kU32, false);
    const int sk = b.shared(Ty::kU32, u(chunk));
    const int si = b.shared(Ty::kU32, u(chunk));
    const Val lid = b.invocation();
    const Val base = b.op("OpIMul", Ty::kU32, {b.workgroup(), b.u32(u(chunk))});
    // The chunk's first position within its line (the network's direction bits).
    const Val line_pos = b.op("OpUMod", Ty::kU32, {base, b.u32(u(s.m))});
    const auto each = [&](std::int64_t count, const std::function<void(const Val&)>& f) {
      for (std::int64_t e0 = 0; e0 < count; e0 += local) {
        const Val e = b.op("OpIAdd", Ty::kU32, {lid, b.u32(u(e0))});
        if (e0 + local <= count) {
          f(e);
        } else {
          b.if_then(b.op("OpULessThan", Ty::kBool, {e, b.u32(u(count))}), [&] { f(e); });
        }
      }
    };
    each(chunk, [&](const Val& e) {
      const Val at = b.op("OpIAdd", Ty::kU32, {base, e});
      b.store_shared(sk, e, b.load(keys, at));
      b.store_shared(si, e, b.load(idx, at));
    });
    b.barrier();
    const Val kb0 = b.push(0), jb0 = b.push(1), kb1 = b.push(2);
    b.loop(kb0, b.op("OpIAdd", Ty::kU32, {kb1, b.u32(1)}), b.u32(1), [&](const Val& kb) {
      const Val k = b.op("OpShiftLeftLogical", Ty::kU32, {b.u32(1), kb});
      const Val top = b.select(b.op("OpIEqual", Ty::kBool, {kb, kb0}), jb0,
                               b.op("OpISub", Ty::kU32, {kb, b.u32(1)}));
      b.loop(b.u32(0), b.op("OpIAdd", Ty::kU32, {top, b.u32(1)}), b.u32(1), [&](const Val& step) {
        const Val j = b.op("OpShiftLeftLogical", Ty::kU32, {b.u32(1), b.op("OpISub", Ty::kU32, {top, step})});
        const int arrays[] = {sk, si};
        each(pairs, [&](const Val& t) {
          const Val lo = pair_low(b, t, j);
          compare_exchange(
              b, lo, b.op("OpIAdd", Ty::kU32, {lo, j}), b.op("OpIAdd", Ty::kU32, {line_pos, lo}), k,
              [&](int a, const Val& at) { return b.load_shared(arrays[a], at); },
              [&](int a, const Val& at, const Val& v) { b.store_shared(arrays[a], at, v); });
        });
        b.barrier();
      });
    });
    each(chunk, [&](const Val& e) {
      const Val at = b.op("OpIAdd", Ty::kU32, {base, e});
      b.store(keys, at, b.load_shared(sk, e));
      b.store(idx, at, b.load_shared(si, e));
    });
    return KernelSource{b.finish(), 2, 3, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  Launch l;
  l.pipeline = &p;
  l.push = {0, 0, 0};
  l.groups = grid_for(ctx, static_cast<std::uint64_t>(s.lines * s.m / chunk), "argsort");
  return l;
}

// result: bindings indices, result (i32); one invocation per element.
Launch sort_result_kernel(Context& ctx, const SortSpec& s, std::uint32_t addressed) {
  const std::uint32_t local = local_size(ctx);
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  {
    std::string key = detail::str_cat("sort.result", shape_key(s, addressed));
    const Pipeline& p = ctx.pipelines().get(key, [&] {
      Builder b(local, 1, addressed);
      const int idx = b.buffer(DType::kU32, true);
      const int res = b.buffer(DType::kI32, false);
      const Val e = b.global_index();
      b.if_then(b.op("OpULessThan", Ty::kBool, {e, b.push(0)}), [&] {
        const Val n = b.u32(u(s.n));
        const Val line = b.op("OpUDiv", Ty::kU32, {e, n});
        const Val pos = b.op("OpUMod", Ty::kU32, {e, n});
        const Val from = b.op("OpIAdd", Ty::kU32, {b.op("OpIMul", Ty::kU32, {line, b.u32(u(s.m))}), pos});
        b.store(res, element_offset(b, line, pos, s), b.bitcast(b.load(idx, from), Ty::kI32));
      });
      return KernelSource{b.finish(), 2, 1, 0, VK_FORMAT_UNDEFINED, addressed};
    });
    return launch_for(ctx, p, static_cast<std::uint64_t>(s.lines) * static_cast<std::uint64_t>(s.n),
                      "argsort");
  }
}

}  // namespace kiln::vk
