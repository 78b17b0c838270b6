// kiln's own f32 GEMM (gemm.hpp), compiled once per x86-64 level that has FMA
// (x86-64-v3: AVX2, x86-64-v4: AVX-512) with that level's -march and
// -DKILN_ISA=<namespace> (backends/meson.build). One source, so the levels
// differ only in vector width.
//
// C (m x n) = op(A) op(B), row-major. The shape of the computation is BLIS's:
// B is packed, kKc rows at a time, into panels of kNr columns (zero-padded to a
// whole panel); A is read in place, kMr rows at a time, through its row and
// column strides (so A and A^T need no copy); a micro-kernel keeps a kMr x kNr
// tile of C in registers, one FMA chain per element over the panel's rows.
// Every element of C is therefore computed the same way wherever it sits:
//   acc = fma(a[i,p], b[p,j], acc) for p in the block, from acc = 0;
//   C = acc for the first k block, C = C + acc for the next ones,
// with k blocks of kKc on both levels. The split over threads cuts C into
// tiles and never cuts k, so the bits do not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/runtime/thread_pool.hpp"

#ifndef KILN_ISA
#error "gemm_kernels.cpp is compiled with -DKILN_ISA=<namespace> (backends/meson.build)"
#endif

namespace kiln::cpu::KILN_ISA {
namespace {

#if defined(__AVX512F__)
using V = __m512;
constexpr int kW = 16;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vbroadcast(const float* p) { return _mm512_set1_ps(*p); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
constexpr const char* kName = "kiln AVX-512 6x32";
#elif defined(__AVX2__) && defined(__FMA__)
using V = __m256;
constexpr int kW = 8;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vbroadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
constexpr const char* kName = "kiln AVX2 6x16";
#else
#error "gemm_kernels.cpp needs AVX2 and FMA (x86-64-v3) or AVX-512 (x86-64-v4)"
#endif

constexpr int kMr = 6;            // rows of C per micro-tile (A broadcasts)
constexpr int kNv = 2;            // vectors per micro-tile row
constexpr int kNr = kNv * kW;     // columns of C per micro-tile (one packed panel)
constexpr std::int64_t kKc = 256;  // rows of B per packed block (same on every level)
// Columns of C per task at most: its packed B block (kKc x kMaxCols floats,
// 512 KiB) stays in L2.
constexpr std::int64_t kMaxCols = 512;
// Below this many multiply-adds a product runs on the calling thread.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 20;

struct Operand {  // element (i, j) at p[i * rs + j * cs]
  const float* p;
  std::int64_t rs, cs;
};

// C[0:R, 0:cols) (+)= A[0:R, 0:kc) * Bpanel (kc x kNr, rows ldb apart: packed
// or B itself), where A's rows
// start at `a` with strides (rs, cs) and C's element (i, j) is c[i * ldc + j],
// or c[j * ldc + i] when `ct` (C^T computed, see sgemm). A partial or transposed
// tile goes through a padded copy; the values are the same either way.
template <int R>
void micro(std::int64_t kc, const float* a, std::int64_t rs, std::int64_t cs, const float* bp,
           std::int64_t ldb, float* c, std::int64_t ldc, int cols, bool ct, bool accumulate) {
  V acc[R][kNv];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) acc[i][v] = vzero();
  }
  const float* row[R];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) row[i] = a + i * rs;
  for (std::int64_t p = 0; p < kc; ++p) {
    V b[kNv];
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) b[v] = vload(bp + v * kW);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const V x = vbroadcast(row[i] + p * cs);
#pragma GCC unroll 2
      for (int v = 0; v < kNv; ++v) acc[i][v] = vfma(x, b[v], acc[i][v]);
    }
    bp += ldb;
  }
  if (cols == kNr && !ct) {
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int v = 0; v < kNv; ++v) {
        float* dst = c + i * ldc + v * kW;
        vstore(dst, accumulate ? vadd(vload(dst), acc[i][v]) : acc[i][v]);
      }
    }
    return;
  }
  // Every index into acc is a constant (unrolled loops), so GCC keeps the
  // accumulators in registers through the k loop instead of on the stack.
  alignas(64) float tile[R][kNr];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) vstore(tile[i] + v * kW, acc[i][v]);
  }
  const std::int64_t si = ct ? 1 : ldc, sj = ct ? ldc : 1;
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < cols; ++j) {
      float& dst = c[i * si + j * sj];
      dst = accumulate ? dst + tile[i][j] : tile[i][j];
    }
  }
}

using Micro = void (*)(std::int64_t, const float*, std::int64_t, std::int64_t, const float*,
                       std::int64_t, float*, std::int64_t, int, bool, bool);
constexpr Micro kMicro[kMr + 1] = {nullptr,   &micro<1>, &micro<2>, &micro<3>,
                                   &micro<4>, &micro<5>, &micro<6>};

// dst[r * lds + c] = src[c * ld + r] for an 8 x 8 block (AVX, both levels).
inline void transpose8(const float* src, std::int64_t ld, float* dst, std::int64_t lds) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * lds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * lds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// dst = B[p0:p0+kc, j0:j0+cols) as panels of kNr columns, each kc x kNr with
// zeros past `cols`.
void pack_b(const Operand& b, std::int64_t p0, std::int64_t kc, std::int64_t j0,
            std::int64_t cols, float* dst) {
  for (std::int64_t jp = 0; jp < cols; jp += kNr) {
    const std::int64_t w = std::min<std::int64_t>(kNr, cols - jp);
    float* panel = dst + jp * kc;
    const float* src = b.p + p0 * b.rs + (j0 + jp) * b.cs;
    if (b.cs == 1) {  // rows of B are contiguous: copy row segments
      for (std::int64_t p = 0; p < kc; ++p) {
        std::memcpy(panel + p * kNr, src + p * b.rs, sizeof(float) * w);
        std::fill(panel + p * kNr + w, panel + (p + 1) * kNr, 0.0f);
      }
    } else {  // B^T stored: its rows are B's columns, a w x kc transpose
      if (w < kNr) std::fill(panel, panel + kc * kNr, 0.0f);
      std::int64_t j = 0;
      if (b.rs == 1) {
        for (; j + 8 <= w; j += 8) {
          std::int64_t p = 0;
          for (; p + 8 <= kc; p += 8) transpose8(src + j * b.cs + p, b.cs, panel + p * kNr + j, kNr);
          for (; p < kc; ++p) {
            for (std::int64_t jj = j; jj < j + 8; ++jj) panel[p * kNr + jj] = src[jj * b.cs + p];
          }
        }
      }
      for (; j < w; ++j) {
        const float* col = src + j * b.cs;
        for (std::int64_t p = 0; p < kc; ++p) panel[p * kNr + j] = col[p * b.rs];
      }
    }
  }
}

struct Scratch {  // one packed B block per thread
  std::unique_ptr<float[], void (*)(float*)> data{nullptr, [](float* p) { ::operator delete[](p, std::align_val_t{64}); }};
  std::int64_t size = 0;
  float* get(std::int64_t n) {
    if (n > size) {
      data.reset(static_cast<float*>(::operator new[](sizeof(float) * n, std::align_val_t{64})));
      size = n;
    }
    return data.get();
  }
};

// Strips of A a packed B panel must serve to pay for its copy: below this, a
// B with contiguous rows is read in place (its last partial panel is still
// packed, so no read passes a row's end).
constexpr std::int64_t kPackReuse = 12;

// C[i0:i1, j0:j1) of the product, all of k.
void tile(std::int64_t k, const Operand& a, const Operand& b, float* c, std::int64_t ldc, bool ct,
          std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  thread_local Scratch scratch;
  const std::int64_t cols = j1 - j0;
  const bool in_place = b.cs == 1 && (i1 - i0 + kMr - 1) / kMr < kPackReuse;
  const std::int64_t full = in_place ? cols / kNr * kNr : 0;  // panels read in place
  const std::int64_t padded = (cols - full + kNr - 1) / kNr * kNr;
  float* packed = scratch.get(std::max<std::int64_t>(std::min(k, kKc) * padded, 1));
  for (std::int64_t p0 = 0; p0 < k; p0 += kKc) {
    const std::int64_t kc = std::min(kKc, k - p0);
    if (padded > 0) pack_b(b, p0, kc, j0 + full, cols - full, packed);
    for (std::int64_t i = i0; i < i1; i += kMr) {
      const int r = static_cast<int>(std::min<std::int64_t>(kMr, i1 - i));
      const float* ai = a.p + i * a.rs + p0 * a.cs;
      for (std::int64_t jp = 0; jp < cols; jp += kNr) {
        float* cij = ct ? c + (j0 + jp) * ldc + i : c + i * ldc + j0 + jp;
        const bool direct = jp < full;
        const float* bp = direct ? b.p + p0 * b.rs + j0 + jp : packed + (jp - full) * kc;
        kMicro[r](kc, ai, a.rs, a.cs, bp, direct ? b.rs : kNr, cij, ldc,
                  static_cast<int>(std::min<std::int64_t>(kNr, cols - jp)), ct, p0 > 0);
      }
    }
  }
}

}  // namespace

const char* sgemm_name() { return kName; }

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
           float* c, bool ta, bool tb) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill_n(c, m * n, 0.0f);
    return;
  }
  Operand oa = ta ? Operand{a, 1, m} : Operand{a, k, 1};
  Operand ob = tb ? Operand{b, 1, k} : Operand{b, n, 1};
  // A C narrower than a panel but taller than a strip wastes most of each
  // tile on padding: compute C^T = op(B)^T op(A)^T instead (stored through
  // C's transposed strides). Each element's FMA chain is the same (fma(x, y, z)
  // == fma(y, x, z)), so the bits are too.
  const std::int64_t ldc = n;
  const bool ct = n < kNr && m > n;
  if (ct) {
    std::swap(m, n);
    const Operand t{ob.p, ob.cs, ob.rs};
    ob = Operand{oa.p, oa.cs, oa.rs};
    oa = t;
  }
  const std::int64_t strips = (m + kMr - 1) / kMr;
  const std::int64_t panels = (n + kNr - 1) / kNr;
  // Tasks: column groups first (each packs its own part of B once per k
  // block), then row groups; about 2 per thread for balance when the product
  // is big enough to be worth waking the pool.
  const auto threads = static_cast<std::int64_t>(num_threads());
  std::int64_t col_groups = (panels * kNr + kMaxCols - 1) / kMaxCols;
  std::int64_t row_groups = 1;
  if (threads > 1 && m * n * k >= kParallelWork) {
    const std::int64_t want = 2 * threads;
    col_groups = std::max(col_groups, std::min(panels, want));
    row_groups = std::min(strips, (want + col_groups - 1) / col_groups);
  }
  const std::int64_t panels_per = (panels + col_groups - 1) / col_groups;
  const std::int64_t strips_per = (strips + row_groups - 1) / row_groups;
  const auto run = [&](std::size_t t) {
    const auto rg = static_cast<std::int64_t>(t) / col_groups;
    const auto cg = static_cast<std::int64_t>(t) % col_groups;
    const std::int64_t i0 = rg * strips_per * kMr, j0 = cg * panels_per * kNr;
    if (i0 >= m || j0 >= n) return;
    tile(k, oa, ob, c, ldc, ct, i0, std::min(m, i0 + strips_per * kMr), j0,
         std::min(n, j0 + panels_per * kNr));
  };
  const auto tasks = static_cast<std::size_t>(row_groups * col_groups);
  if (tasks == 1) {
    run(0);
  } else {
    parallel_for(tasks, run);
  }
}

}  // namespace kiln::cpu::KILN_ISA
