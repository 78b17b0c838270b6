// Batched matmul, two designs chosen by Capabilities::matmul_shared_tiles.
//
// Shared-memory tiles (GPUs): a workgroup of T x T invocations computes a
// (8T x 8T) block of the output, 8 x 8 outputs per invocation, walking K in
// steps of 16 through tiles of A and B staged in workgroup memory. Invocation
// (tx, ty) owns rows ty + i T and columns tx + j T: neighbouring invocations
// read neighbouring words of the B tile (no bank conflicts) and store
// neighbouring columns. Edges are handled by zero-filling the tiles (loads use
// a clamped index). f16 products without an epilogue take cooperative
// matrices instead where the device has them (below).
//
// Register tiles (CPU-type devices): no shared memory and no barriers (a CPU
// implementation pays for each barrier by saving and resuming every SIMD slice
// of the workgroup). Each invocation owns R rows x C adjacent columns and walks
// K in steps of 4, reading its A rows and B rows straight from memory. CPU
// implementations run every storage-buffer access as a loop over the SIMD lanes,
// so what a kernel pays for is the number of load instructions, not bytes:
// A is read as 4-vectors along k, B as 8 columns at a time (four u64, where
// the device has shaderInt64) or 4-vectors, and each loaded value feeds C or R
// multiply-adds. Where Capabilities::texel_loads allows, A and B 4-vectors are
// texels of uniform texel buffers instead, which lavapipe fetches without the
// lane loop (one 16-byte load per lane, then a 4 x 8 transpose). Loads use
// clamped rows and columns (always in bounds) and the stores are guarded, so
// ragged edges cost nothing inside the K loop.
//
// Every shape takes one of these kernels. Integer matmul wraps; f16 accumulates
// in f32.
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

namespace {

// The register-tile kernel's shape: a workgroup of TX x TY invocations computes
// a (TY * R) x (TX * C) block; `a` and `b` are the elements per load of A (along
// k) and of B (along n): 1, 4 or 8; `c4` stores C as 4-vectors.
struct RegisterPlan {
  std::uint32_t R = 4, C = 8, TX = 8, TY = 4;
  std::uint32_t a = 1, b = 1;
  bool a_texel = false, b_texel = false;  // 4-element loads as texel fetches
  bool c4 = false;
};

bool is32(DType d) { return d == DType::kF32 || d == DType::kI32 || d == DType::kU32; }

// Every batch offset of `v` is a multiple of q elements.
bool aligned(const View& v, std::int64_t q) {
  if (v.offset % q != 0) return false;
  for (std::int64_t st : v.strides) {
    if (st % q != 0) return false;
  }
  return true;
}

// Elements of an operand's array the kernel can reach: its last batch's offset
// plus one matrix.
std::int64_t reach(const View& v, const Shape& batch, std::int64_t matrix) {
  std::int64_t last = v.offset;
  for (std::size_t d = 0; d < batch.size(); ++d) last += (batch[d] - 1) * v.strides[d];
  return last + matrix;
}

RegisterPlan register_plan(const Context& ctx, const MatmulSpec& s) {
  RegisterPlan p;
  const auto& caps = ctx.caps();
  const bool vec = is32(s.dtype);
  const bool wide = vec && caps.wide_loads;
  const auto texels_fit = [&](const View& v, std::int64_t matrix) {
    return caps.texel_loads &&
           static_cast<std::uint64_t>(reach(v, s.batch, matrix) / 4) <= caps.max_texel_buffer_elements;
  };
  if (vec && s.k % 4 == 0 && aligned(s.a_batch, 4)) {
    p.a = 4;
    p.a_texel = texels_fit(s.a_batch, s.m * s.k);
  }
  const bool b4 = vec && s.n % 4 == 0 && aligned(s.b_batch, 4);
  if (b4 && texels_fit(s.b_batch, s.k * s.n)) {
    p.b = 4;  // a texel fetch moves 4 elements for less than a u64 x 4 load's lane loop
    p.b_texel = true;
  } else if (wide && s.n % 8 == 0 && aligned(s.b_batch, 8)) {
    p.b = 8;
  } else if (b4) {
    p.b = 4;
  }
  // Bigger tiles run faster but take longer to build and for the driver to
  // compile (on lavapipe, CPU time with texel loads: 8 x 16 ~0.23 s against
  // ~0.07 s for 4 x 8, once per shape), so only products of at least 256^3
  // multiply-adds get them.
  const double work = static_cast<double>(s.m) * static_cast<double>(s.n) *
                      static_cast<double>(s.k) * static_cast<double>(numel(s.batch));
  const bool big = work >= 16777216.0;
  p.R = big ? 8 : 4;
  p.C = p.b == 1 ? 4 : big ? 16 : 8;  // scalar B loads: one per column
  p.TX = 8;
  p.TY = big ? 2 : 4;
  p.c4 = p.b > 1 && s.fused == nullptr;
  return p;
}

// The launch of `p` over blocks of bm x bn outputs, one grid layer per batch;
// a grid past the device's workgroup counts is refused.
Launch grid_launch(const Context& ctx, const MatmulSpec& s, const Pipeline& p, std::uint32_t bm,
                   std::uint32_t bn) {
  const std::int64_t batches = numel(s.batch);
  const auto& max = ctx.caps().max_group_count;
  const std::uint64_t gx = (static_cast<std::uint64_t>(s.n) + bn - 1) / bn;
  const std::uint64_t gy = (static_cast<std::uint64_t>(s.m) + bm - 1) / bm;
  if (gx > max[0] || gy > max[1] || static_cast<std::uint64_t>(batches) > max[2]) {
    throw DeviceError(detail::str_cat("[matmul] (", s.m, " x ", s.k, ") @ (", s.k, " x ", s.n,
                                      ") with ", batches, " batches exceeds the dispatch grid of ",
                                      ctx.device().to_string()));
  }
  Launch l;
  l.pipeline = &p;
  l.groups = {static_cast<std::uint32_t>(gx), static_cast<std::uint32_t>(gy),
              static_cast<std::uint32_t>(batches)};
  return l;
}

// Cooperative-matrix design (Capabilities::coopmat, f16 products without an
// epilogue): the tensor cores through SPV_NV_cooperative_matrix. A workgroup of
// kWarps x kWarps subgroups computes a 128 x 128 block; each subgroup owns
// kTiles x kTiles output tiles of 16 x 16, accumulated in f32 and stored
// rounded to f16. Per K step of 16 a subgroup loads its kTiles A tiles and
// kTiles B tiles straight from the arrays (row-major, the L1 and L2 caches
// share them between subgroups) and issues kTiles^2 multiply-adds. M, N and K
// are multiples of 16 (the tiles' loads are unguarded): tiles past M or N load
// the last tile's rows or columns instead and are not stored.
constexpr std::uint32_t kWarps = 2, kTiles = 4, kTile = 16;

bool coop_fits(const Context& ctx, const MatmulSpec& s, std::uint32_t addressed) {
  return ctx.caps().coopmat && s.dtype == DType::kF16 && s.fused == nullptr && addressed == 0 &&
         s.m % kTile == 0 && s.n % kTile == 0 && s.k % kTile == 0 && aligned(s.a_batch, 8) &&
         aligned(s.b_batch, 8);
}

}  // namespace

KernelSource coop_matmul_source(const MatmulSpec& s, std::uint32_t sg_size) {
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const std::uint32_t block = kWarps * kTiles * kTile;
  Builder b(kWarps * kWarps * sg_size, 0);
  const int A = b.buffer(DType::kF16, true);
  const int B = b.buffer(DType::kF16, true);
  const int C = b.buffer(DType::kF16, false);
  const std::string t16 = b.coop_type(DType::kF16, kTile, kTile);
  const std::string t32 = b.coop_type(DType::kF32, kTile, kTile);
  const auto add = [&](const Val& x, const Val& y) { return b.op("OpIAdd", Ty::kU32, {x, y}); };
  const auto mul = [&](const Val& x, const Val& y) { return b.op("OpIMul", Ty::kU32, {x, y}); };
  const auto umin = [&](const Val& x, const Val& y) { return b.glsl("UMin", Ty::kU32, {x, y}); };
  const Val M = b.u32(u(s.m)), N = b.u32(u(s.n)), K = b.u32(u(s.k));
  const Val sg = b.subgroup_id();
  const Val sx = b.op("OpUMod", Ty::kU32, {sg, b.u32(kWarps)});
  const Val sy = b.op("OpUDiv", Ty::kU32, {sg, b.u32(kWarps)});
  const Val row0 = add(mul(b.workgroup_id(1), b.u32(block)), mul(sy, b.u32(kTiles * kTile)));
  const Val col0 = add(mul(b.workgroup_id(0), b.u32(block)), mul(sx, b.u32(kTiles * kTile)));
  const Val bz = b.workgroup_id(2);
  const Val abase = add(b.u32(u(s.a_batch.offset)), offset_of(b, bz, s.batch, s.a_batch.strides));
  const Val bbase = add(b.u32(u(s.b_batch.offset)), offset_of(b, bz, s.batch, s.b_batch.strides));
  const Val cbase = mul(bz, b.u32(u(s.m * s.n)));
  std::vector<Val> rows, cols, arow;  // first row / column of each tile; A's row offset
  for (std::uint32_t i = 0; i < kTiles; ++i) {
    rows.push_back(add(row0, b.u32(i * kTile)));
    cols.push_back(add(col0, b.u32(i * kTile)));
    arow.push_back(add(abase, mul(umin(rows.back(), b.u32(u(s.m - kTile))), K)));
  }
  std::vector<Val> bcol;
  for (std::uint32_t j = 0; j < kTiles; ++j) {
    bcol.push_back(add(bbase, umin(cols[j], b.u32(u(s.n - kTile)))));
  }
  std::vector<std::string> acc;
  const std::string zero = b.coop_fill(t32, Ty::kF32, 0.0);
  for (std::uint32_t i = 0; i < kTiles * kTiles; ++i) {
    acc.push_back(b.coop_variable(t32));
    b.coop_set(acc.back(), zero);
  }
  b.loop(b.u32(0), K, b.u32(kTile), [&](const Val& k0) {
    std::vector<std::string> at, bt, sums;
    for (std::uint32_t i = 0; i < kTiles; ++i) at.push_back(b.coop_load(t16, A, add(arow[i], k0), K));
    const Val brow = mul(k0, N);
    for (std::uint32_t j = 0; j < kTiles; ++j) bt.push_back(b.coop_load(t16, B, add(bcol[j], brow), N));
    for (std::uint32_t i = 0; i < kTiles; ++i) {
      for (std::uint32_t j = 0; j < kTiles; ++j) {
        const std::string& v = acc[i * kTiles + j];
        b.coop_set(v, b.coop_muladd(t32, at[i], bt[j], b.coop_get(t32, v)));
      }
    }
  });
  for (std::uint32_t i = 0; i < kTiles; ++i) {
    for (std::uint32_t j = 0; j < kTiles; ++j) {
      const Val ok = b.op("OpLogicalAnd", Ty::kBool, {b.op("OpULessThan", Ty::kBool, {rows[i], M}),
                                                     b.op("OpULessThan", Ty::kBool, {cols[j], N})});
      b.if_then(ok, [&] {
        const std::string out = b.coop_convert(t16, b.coop_get(t32, acc[i * kTiles + j]));
        b.coop_store(C, add(cbase, add(mul(rows[i], N), cols[j])), out, N);
      });
    }
  }
  return KernelSource{b.finish(), 3, 0, 0, VK_FORMAT_UNDEFINED, 0};
}

namespace {

Launch coop_matmul_kernel(Context& ctx, const MatmulSpec& s) {
  const std::uint32_t sg_size = ctx.caps().subgroup_size;
  const std::uint32_t block = kWarps * kTiles * kTile;
  const std::string key = detail::str_cat(
      "matmul|f16|coop", kWarps, "x", kTiles, "/", sg_size, "|mnk=", s.m, ",", s.n, ",", s.k,
      "|b=", detail::join(s.batch, ","), "|a=", s.a_batch.offset, ":",
      detail::join(s.a_batch.strides, ","), "|b=", s.b_batch.offset, ":",
      detail::join(s.b_batch.strides, ","));
  const Pipeline& p = ctx.pipelines().get(key, [&] { return coop_matmul_source(s, sg_size); });
  return grid_launch(ctx, s, p, block, block);
}

}  // namespace

Launch matmul_kernel(Context& ctx, const MatmulSpec& s, std::uint32_t addressed) {
  if (coop_fits(ctx, s, addressed)) return coop_matmul_kernel(ctx, s);
  const std::uint32_t T = ctx.caps().max_invocations >= 256 ? 16 : 8;
  const std::uint32_t BK = 16;
  const Ty t = spv::compute_type(s.dtype);
  const bool f = spv::is_float(t);
  const bool tiled = ctx.caps().matmul_shared_tiles;
  const auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  const RegisterPlan rp = tiled ? RegisterPlan{} : register_plan(ctx, s);
  // Outputs per invocation (rows x columns) and the workgroup's shape.
  const std::uint32_t R = tiled ? 8 : rp.R, Cn = tiled ? 8 : rp.C;
  const std::uint32_t TX = tiled ? T : rp.TX, TY = tiled ? T : rp.TY;
  const std::uint32_t BM = TY * R, BN = TX * Cn;
  const std::uint32_t threads = TX * TY;
  // The K loop's iterations per invocation (Quirks::max_loop_iterations).
  const std::uint64_t trips = tiled ? (static_cast<std::uint64_t>(s.k) + BK - 1) / BK
                                    : static_cast<std::uint64_t>(s.k) / 4 + 3;
  if (const std::uint64_t limit = ctx.quirks().max_loop_iterations; limit > 0 && trips > limit) {
    throw DeviceError(detail::str_cat(
        "[matmul] an inner dimension of ", s.k, " takes ", trips, " loop iterations per "
        "invocation; the driver of ", ctx.device().to_string(), " (", ctx.name(),
        ") stops loops after ", limit, ": split the product along that dimension"));
  }
  const std::string design =
      tiled ? std::string("smem")
            : detail::str_cat("regs", R, "x", Cn, "/", TX, "x", TY, "/a", rp.a,
                              rp.a_texel ? "t" : "", "b", rp.b, rp.b_texel ? "t" : "",
                              rp.c4 ? "c4" : "");
  const std::string key = detail::str_cat(
      "matmul|", name(s.dtype), "|T=", T, "|", design, "|mnk=", s.m, ",", s.n, ",", s.k, "|b=",
      detail::join(s.batch, ","), "|a=", s.a_batch.offset, ":",
      detail::join(s.a_batch.strides, ","), "|b=", s.b_batch.offset, ":",
      detail::join(s.b_batch.strides, ","));
  std::string full_key = key;
  if (addressed != 0) full_key += detail::str_cat("|addr=", addressed);
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
    Builder b(threads, 0, addressed);
    const auto operand = [&](std::uint32_t width, bool texel) {
      return texel        ? b.texel_buffer4(s.dtype)
             : width == 8 ? b.buffer8(s.dtype, true)
             : width == 4 ? b.buffer4(s.dtype, true)
                          : b.buffer(s.dtype, true);
    };
    const int A = operand(rp.a, rp.a_texel);
    const int B = operand(rp.b, rp.b_texel);
    // The product, or with an epilogue its inputs and outputs.
    int C = -1, first_out = -1;
    if (s.fused == nullptr) {
      C = rp.c4 ? b.buffer4(s.dtype, false) : b.buffer(s.dtype, false);
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
    Val tx = b.op("OpUMod", Ty::kU32, {lid, b.u32(TX)});
    Val ty = b.op("OpUDiv", Ty::kU32, {lid, b.u32(TX)});
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
    for (std::uint32_t i = 0; i < R * Cn; ++i) {
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
    if (!tiled) {
      // Invocation (tx, ty) owns rows r0 + i and columns c0 + j.
      Val r0 = add(row0, mul(ty, b.u32(R)));
      Val c0 = add(col0, mul(tx, b.u32(Cn)));
      const auto umin = [&](const Val& x, const Val& y) {
        return b.glsl("UMin", Ty::kU32, {x, y});
      };
      const auto shr = [&](const Val& x, std::uint32_t width) {
        return width == 8 ? b.op("OpShiftRightLogical", Ty::kU32, {x, b.u32(3)})
               : width == 4 ? b.op("OpShiftRightLogical", Ty::kU32, {x, b.u32(2)})
                            : x;
      };
      // `width` consecutive elements of `buf` from element `at` (a multiple of width).
      const auto load_run = [&](int buf, std::uint32_t width, const Val& at, std::vector<Val>& out) {
        if (width == 8) {
          const auto v = b.load8(buf, shr(at, 8));
          out.insert(out.end(), v.begin(), v.end());
        } else if (width == 4) {
          const auto v = b.load4(buf, shr(at, 4));
          out.insert(out.end(), v.begin(), v.end());
        } else {
          out.push_back(b.load(buf, at));
        }
      };
      std::vector<Val> rows, arow;  // arow: element offset of the (clamped) row in A
      for (std::uint32_t i = 0; i < R; ++i) {
        rows.push_back(add(r0, b.u32(i)));
        arow.push_back(add(abase, mul(umin(rows.back(), b.u32(u(s.m - 1))), K)));
      }
      // Columns in runs of rp.b; a run starting at or past N lies wholly past it
      // (N is a multiple of the run), so clamping its start keeps loads in bounds.
      std::vector<Val> cols, bcol;
      for (std::uint32_t j = 0; j < Cn; ++j) cols.push_back(add(c0, b.u32(j)));
      for (std::uint32_t j = 0; j < Cn; j += rp.b) bcol.push_back(umin(cols[j], b.u32(u(s.n - rp.b))));
      const auto fma = [&](const Val& x, const Val& y, const Val& z) {
        return f ? b.glsl("Fma", t, {x, y, z})
                 : b.op("OpIAdd", t, {b.op("OpIMul", t, {x, y}), z});
      };
      // nk consecutive k from k (nk a multiple of rp.a): the A values of each
      // row, then B row by row with its multiply-adds.
      const auto step = [&](const Val& k, std::uint32_t nk) {
        std::vector<std::vector<Val>> av(R);
        for (std::uint32_t i = 0; i < R; ++i) {
          for (std::uint32_t q = 0; q < nk; q += rp.a) load_run(A, rp.a, add(arow[i], add(k, b.u32(q))), av[i]);
        }
        std::vector<Val> sums;
        for (std::uint32_t i = 0; i < R * Cn; ++i) sums.push_back(b.get(acc[i]));
        for (std::uint32_t q = 0; q < nk; ++q) {
          Val brow = add(bbase, mul(add(k, b.u32(q)), N));
          std::vector<Val> bv;
          for (const Val& c : bcol) load_run(B, rp.b, add(brow, c), bv);
          for (std::uint32_t i = 0; i < R; ++i) {
            for (std::uint32_t j = 0; j < Cn; ++j) sums[i * Cn + j] = fma(av[i][q], bv[j], sums[i * Cn + j]);
          }
        }
        for (std::uint32_t i = 0; i < R * Cn; ++i) b.set(acc[i], sums[i]);
      };
      constexpr std::uint32_t kStep = 4;
      const auto kmain = u(s.k - s.k % kStep);
      if (kmain > 0) b.loop(b.u32(0), b.u32(kmain), b.u32(kStep), [&](const Val& k) { step(k, kStep); });
      if (kmain < s.k) {  // K % 4 != 0: A is read element by element (rp.a == 1)
        b.loop(b.u32(kmain), K, b.u32(1), [&](const Val& k) { step(k, 1); });
      }
      const std::uint32_t cw = rp.c4 ? 4 : 1;
      for (std::uint32_t i = 0; i < R; ++i) {
        for (std::uint32_t j = 0; j < Cn; j += cw) {
          Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(rows[i], M), lt(cols[j], N)});
          b.if_then(ok, [&] {
            Val idx = add(cbase, add(mul(rows[i], N), cols[j]));
            if (rp.c4) {  // N % 4 == 0: the 4 columns are all in or all out
              b.store4(C, shr(idx, 4), {b.get(acc[i * Cn + j]), b.get(acc[i * Cn + j + 1]),
                                        b.get(acc[i * Cn + j + 2]), b.get(acc[i * Cn + j + 3])});
            } else {
              store_at(rows[i], cols[j], idx, b.get(acc[i * Cn + j]));
            }
          });
        }
      }
      return KernelSource{b.finish(), bindings, 0, b.texel_bindings(), texel_format(s.dtype),
                          addressed};
    }
    // Reads buffer[base + r * ld + c] when r < rows and c < cols, else 0.
    const auto guarded = [&](int buf, const Val& base, const Val& r, const Val& c,
                             const Val& rows, const Val& cols, const Val& ld) {
      Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(r, rows), lt(c, cols)});
      Val idx = b.select(ok, add(base, add(mul(r, ld), c)), b.u32(0));
      return b.select(ok, b.load(buf, idx), zero);
    };
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
          av.push_back(b.load_shared(As, add(b.u32(kk * BM), add(ty, b.u32(i * TY)))));
          bv.push_back(b.load_shared(Bs, add(b.u32(kk * BN), add(tx, b.u32(i * TX)))));
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
        Val r = add(row0, add(ty, b.u32(i * TY)));
        Val c = add(col0, add(tx, b.u32(j * TX)));
        Val ok = b.op("OpLogicalAnd", Ty::kBool, {lt(r, M), lt(c, N)});
        b.if_then(ok, [&] { store_at(r, c, add(cbase, add(mul(r, N), c)), b.get(acc[i * R + j])); });
      }
    }
    return KernelSource{b.finish(), bindings, 0, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  return grid_launch(ctx, s, p, BM, BN);
}

}  // namespace kiln::vk
