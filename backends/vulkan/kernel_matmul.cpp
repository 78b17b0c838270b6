// Batched matmul, tiled for shared memory: a workgroup of T x T invocations
// computes a (4T x 4T) block of the output, 4 x 4 outputs per invocation, walking
// K in steps of 16 through tiles of A and B staged in workgroup memory. Edges are
// handled by zero-filling the tiles (loads use a clamped index), so every shape
// takes the same kernel. Integer matmul wraps; f16 accumulates in f32.
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

using spv::Builder;
using spv::Ty;
using spv::Val;

MatmulSpec matmul_spec(const Shape& a, const Shape& b, const Aval& out) {
  MatmulSpec s;
  const std::size_t r = out.shape.size();
  s.m = out.shape[r - 2];
  s.n = out.shape[r - 1];
  s.k = a[a.size() - 1];
  s.dtype = out.dtype;
  s.batch = Shape(out.shape.begin(), out.shape.end() - 2);
  const auto batch_view = [&](const Shape& x, std::int64_t per) {
    View v = broadcast_view(Shape(x.begin(), x.end() - 2), s.batch);
    for (auto& st : v.strides) st *= per;
    return v;
  };
  s.a_batch = batch_view(a, s.m * s.k);
  s.b_batch = batch_view(b, s.k * s.n);
  return s;
}

Launch matmul_kernel(Context& ctx, const MatmulSpec& s) {
  const std::uint32_t T = ctx.caps().max_invocations >= 256 ? 16 : 8;
  const std::uint32_t R = 4;             // outputs per invocation per side
  const std::uint32_t BM = T * R, BN = T * R, BK = 16;
  const std::uint32_t threads = T * T;
  const Ty t = spv::compute_type(s.dtype);
  const bool f = spv::is_float(t);
  const bool tiled = ctx.caps().matmul_shared_tiles;
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const std::string key = detail::str_cat(
      "matmul|", name(s.dtype), "|T=", T, tiled ? "|smem" : "|regs", "|mnk=", s.m, ",", s.n, ",", s.k, "|b=",
      detail::join(s.batch, ","), "|a=", s.a_batch.offset, ":",
      detail::join(s.a_batch.strides, ","), "|b=", s.b_batch.offset, ":",
      detail::join(s.b_batch.strides, ","));
  std::string full_key = key;
  if (s.fused != nullptr) {
    full_key += detail::str_cat("|epi=", s.fused->key, "|");
    for (std::size_t k = 0; k < s.fused->inputs.size(); ++k) {
      full_key += detail::str_cat(name(s.fused->inputs[k]), "@", s.fused->views[k].offset, ":",
                                  detail::join(s.fused->views[k].strides, ","), ";");
    }
    for (DType d : s.fused->outputs) full_key += detail::str_cat(">", name(d));
  }
  const auto bindings = static_cast<std::uint32_t>(
      s.fused == nullptr ? 3 : 2 + s.fused->inputs.size() + s.fused->outputs.size());
  const Pipeline& p = ctx.pipelines().get(full_key, [&] {
    Builder b(threads, 0);
    const int A = b.buffer(s.dtype, true);
    const int B = b.buffer(s.dtype, true);
    // The product, or with an epilogue its inputs and outputs.
    int C = -1, first_out = -1;
    if (s.fused == nullptr) {
      C = b.buffer(s.dtype, false);
    } else {
      for (DType d : s.fused->inputs) b.buffer(d, true);
      for (DType d : s.fused->outputs) {
        const int o = b.buffer(d, false);
        if (first_out < 0) first_out = o;
      }
    }
    const int As = tiled ? b.shared(t, BK * BM) : -1;
    const int Bs = tiled ? b.shared(t, BK * BN) : -1;
    Val lid = b.invocation();
    Val tx = b.op("OpUMod", Ty::kU32, {lid, b.u32(T)});
    Val ty = b.op("OpUDiv", Ty::kU32, {lid, b.u32(T)});
    Val row0 = b.op("OpIMul", Ty::kU32, {b.workgroup_id(1), b.u32(BM)});
    Val col0 = b.op("OpIMul", Ty::kU32, {b.workgroup_id(0), b.u32(BN)});
    Val bz = b.workgroup_id(2);
    Val abase = b.op("OpIAdd", Ty::kU32, {b.u32(u(s.a_batch.offset)),
                                          offset_of(b, bz, s.batch, s.a_batch.strides)});
    Val bbase = b.op("OpIAdd", Ty::kU32, {b.u32(u(s.b_batch.offset)),
                                          offset_of(b, bz, s.batch, s.b_batch.strides)});
    Val cbase = b.op("OpIMul", Ty::kU32, {bz, b.u32(u(s.m * s.n))});
    const Val M = b.u32(u(s.m)), N = b.u32(u(s.n)), K = b.u32(u(s.k));
    // Epilogue inputs: each view's offset at this batch; rows and columns add.
    std::vector<Val> ebase;
    if (s.fused != nullptr) {
      const std::size_t nb = s.batch.size();
      for (const View& v : s.fused->views) {
        const Shape bstr(v.strides.begin(), v.strides.begin() + static_cast<std::ptrdiff_t>(nb));
        ebase.push_back(b.op("OpIAdd", Ty::kU32,
                             {b.u32(u(v.offset)), offset_of(b, bz, s.batch, bstr)}));
      }
    }
    const Val zero = b.constant(t, 0);
    std::vector<spv::Var> acc;
    for (std::uint32_t i = 0; i < R * R; ++i) {
      acc.push_back(b.variable(t));
      b.set(acc.back(), zero);
    }
    const auto add = [&](const Val& x, const Val& y) {
      return b.op("OpIAdd", Ty::kU32, {x, y});
    };
    const auto mul = [&](const Val& x, const Val& y) {
      return b.op("OpIMul", Ty::kU32, {x, y});
    };
    const auto lt = [&](const Val& x, const Val& y) {
      return b.op("OpULessThan", Ty::kBool, {x, y});
    };
    // Reads buffer[base + r * ld + c] when r < rows and c < cols, else 0.
    // Stores output (r, c) at element idx: the product, or the epilogue's values.
    const auto store_at = [&](const Val& r, const Val& c, const Val& idx, const Val& product) {
      if (s.fused == nullptr) return b.store(C, idx, product);
      const std::size_t nb = s.batch.size();
      const LoadFn load = [&](std::size_t k) {
        const View& v = s.fused->views[k];
        Val off = ebase[k];
        if (v.strides[nb] != 0) off = add(off, mul(r, b.u32(u(v.strides[nb]))));
        if (v.strides[nb + 1] != 0) off = add(off, mul(c, b.u32(u(v.strides[nb + 1]))));
        return b.load(A + 2 + static_cast<int>(k), off);
      };
      const std::vector<Val> values = s.epilogue(b, product, load);
      for (std::size_t o = 0; o < values.size(); ++o) {
        b.store(first_out + static_cast<int>(o), idx, values[o]);
      }
    };
    const auto guarded = [&](int buf, const Val& base, const Val& r, const Val& c,
                             const Val& rows, const Val& cols, const Val& ld) {
      Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(r, rows), lt(c, cols)});
      Val idx = b.select(ok, add(base, add(mul(r, ld), c)), b.u32(0));
      return b.select(ok, b.load(buf, idx), zero);
    };
    if (!tiled) {
      // Register tiles straight from memory: invocation (tx, ty) owns rows
      // row0 + ty + i*T and columns col0 + tx + j*T, so neighbouring invocations
      // read neighbouring columns of B. No barriers: CPU implementations pay for
      // each one by saving and resuming every slice of the workgroup.
      std::vector<Val> rows, cols;
      for (std::uint32_t i = 0; i < R; ++i) {
        rows.push_back(add(row0, add(ty, b.u32(i * T))));
        cols.push_back(add(col0, add(tx, b.u32(i * T))));
      }
      b.loop(b.u32(0), K, b.u32(1), [&](const Val& k) {
        std::vector<Val> av, bv, sums;
        // k < K always; rows and columns need a guard only on ragged edges.
        const bool ragged_m = s.m % BM != 0, ragged_n = s.n % BN != 0;
        for (std::uint32_t i = 0; i < R; ++i) {
          av.push_back(ragged_m ? guarded(A, abase, rows[i], k, M, K, K)
                                : b.load(A, add(abase, add(mul(rows[i], K), k))));
          bv.push_back(ragged_n ? guarded(B, bbase, k, cols[i], K, N, N)
                                : b.load(B, add(bbase, add(mul(k, N), cols[i]))));
        }
        for (std::uint32_t i = 0; i < R; ++i) {
          for (std::uint32_t j = 0; j < R; ++j) {
            Val prod = b.op(f ? "OpFMul" : "OpIMul", t, {av[i], bv[j]});
            b.set(acc[i * R + j],
                  b.op(f ? "OpFAdd" : "OpIAdd", t, {b.get(acc[i * R + j]), prod}));
          }
        }
      });
      for (std::uint32_t i = 0; i < R; ++i) {
        for (std::uint32_t j = 0; j < R; ++j) {
          Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(rows[i], M), lt(cols[j], N)});
          b.if_then(ok, [&] {
            store_at(rows[i], cols[j], add(cbase, add(mul(rows[i], N), cols[j])),
                     b.get(acc[i * R + j]));
          });
        }
      }
      return KernelSource{b.finish(), bindings, 0};
    }
    b.loop(b.u32(0), K, b.u32(BK), [&](const Val& k0) {
      for (std::uint32_t e = 0; e < BM * BK / threads; ++e) {
        Val idx = add(lid, b.u32(e * threads));
        Val r = b.op("OpUDiv", Ty::kU32, {idx, b.u32(BK)});
        Val c = b.op("OpUMod", Ty::kU32, {idx, b.u32(BK)});
        b.store_shared(As, add(mul(c, b.u32(BM)), r),
                       guarded(A, abase, add(row0, r), add(k0, c), M, K, K));
      }
      for (std::uint32_t e = 0; e < BK * BN / threads; ++e) {
        Val idx = add(lid, b.u32(e * threads));
        Val r = b.op("OpUDiv", Ty::kU32, {idx, b.u32(BN)});
        Val c = b.op("OpUMod", Ty::kU32, {idx, b.u32(BN)});
        b.store_shared(Bs, idx, guarded(B, bbase, add(k0, r), add(col0, c), K, N, N));
      }
      b.barrier();
      std::vector<Val> sums;
      for (std::uint32_t i = 0; i < R * R; ++i) sums.push_back(b.get(acc[i]));
      for (std::uint32_t kk = 0; kk < BK; ++kk) {
        std::vector<Val> av, bv;
        for (std::uint32_t i = 0; i < R; ++i) {
          av.push_back(b.load_shared(As, add(b.u32(kk * BM), add(mul(ty, b.u32(R)), b.u32(i)))));
          bv.push_back(b.load_shared(Bs, add(b.u32(kk * BN), add(mul(tx, b.u32(R)), b.u32(i)))));
        }
        for (std::uint32_t i = 0; i < R; ++i) {
          for (std::uint32_t j = 0; j < R; ++j) {
            Val prod = b.op(f ? "OpFMul" : "OpIMul", t, {av[i], bv[j]});
            sums[i * R + j] = b.op(f ? "OpFAdd" : "OpIAdd", t, {sums[i * R + j], prod});
          }
        }
      }
      for (std::uint32_t i = 0; i < R * R; ++i) b.set(acc[i], sums[i]);
      b.barrier();
    });
    for (std::uint32_t i = 0; i < R; ++i) {
      for (std::uint32_t j = 0; j < R; ++j) {
        Val r = add(row0, add(mul(ty, b.u32(R)), b.u32(i)));
        Val c = add(col0, add(mul(tx, b.u32(R)), b.u32(j)));
        Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(r, M), lt(c, N)});
        b.if_then(ok, [&] { store_at(r, c, add(cbase, add(mul(r, N), c)), b.get(acc[i * R + j])); });
      }
    }
    return KernelSource{b.finish(), bindings, 0};
  });
  const std::int64_t batches = numel(s.batch);
  const auto& max = ctx.caps().max_group_count;
  const std::uint64_t gx = (static_cast<std::uint64_t>(s.n) + BN - 1) / BN;
  const std::uint64_t gy = (static_cast<std::uint64_t>(s.m) + BM - 1) / BM;
  if (gx > max[0] || gy > max[1] || static_cast<std::uint64_t>(batches) > max[2]) {
    throw DeviceError(detail::str_cat("[matmul] (", s.m, " x ", s.k, ") @ (", s.k, " x ",
                                      s.n, ") with ", batches,
                                      " batches exceeds the dispatch grid of ",
                                      ctx.device().to_string()));
  }
  Launch l;
  l.pipeline = &p;
  l.groups = {static_cast<std::uint32_t>(gx), static_cast<std::uint32_t>(gy),
              static_cast<std::uint32_t>(batches)};
  return l;
}

}  // namespace kiln::vk
