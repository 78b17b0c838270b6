// CPU kernels for reductions (sum, prod, max, min over axes) and index
// reductions (argmax, argmin along one axis).
//
// A reduction of a contiguous row-major array depends only on the runs of
// reduced and kept dims, so the shape is collapsed first: size-1 dims dropped,
// neighbours merged ((2, 3, 4) over {1, 2} is (2, 12) over {1}). Each run of
// reduced dims is then an (outer, n, inner) reduction: with inner == 1
// (everything or the trailing dims reduced: the common cases) a contiguous 1-D
// reduction in SIMD lanes, otherwise a vectorized accumulation of whole rows.
// (xtensor's reducers accumulate one element at a time, bound by the latency of
// the add.)
//
// max/min propagate NaN (like numpy.max); argmax/argmin return the first NaN if
// there is one, else the first occurrence of the extreme value. Sums stay in
// the input dtype: f32 accumulates in f32 (in 256 lanes, which also keeps the
// rounding error lower than a running sum), i32 wraps modulo 2^32 (summed as
// u32).
//
// Large reductions run on the thread pool (parallel.hpp) with the same bits at
// every thread count: kept elements (rows, or blocks of columns) are split
// between tasks, each computed exactly as on one thread, and a long reduced
// extent (a contiguous row past kPiece elements, a middle dim past
// piece_rows()) is reduced in pieces fixed by the shape, whose results are
// combined in order. The pieces are where the thread pool changed the order of
// float operations, for every thread count alike, 1 included.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xnoalias.hpp>

#include "kiln/backends/cpu/broadcast.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/backends/cpu/parallel.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {
namespace {

// Reduction functors: operator() on scalars, simd_apply on xsimd batches.
struct Plus {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x + y);
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return x + y;
  }
};
struct Times {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x * y);
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return x * y;
  }
};
using NanMax = NanMaximum;  // NaN wins, as numpy.max
using NanMin = NanMinimum;

// The identity of each reduction (-inf, not lowest(), so that max of [-inf]
// works).
template <class Op, class T>
constexpr T identity() {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_same_v<Op, Plus>) {
    return T(0);
  } else if constexpr (std::is_same_v<Op, Times>) {
    return T(1);
  } else if constexpr (std::is_same_v<Op, NanMax>) {
    return L::has_infinity ? -L::infinity() : L::lowest();
  } else {
    return L::has_infinity ? L::infinity() : L::max();
  }
}

// Element types as the kernels see them: i32 sums wrap on u32 bits (no UB),
// bool is its 0/1 byte.
template <class T, class Op>
using Stored =
    std::conditional_t<std::is_same_v<T, bool>, std::uint8_t,
                       std::conditional_t<std::is_same_v<T, std::int32_t> &&
                                              (std::is_same_v<Op, Plus> ||
                                               std::is_same_v<Op, Times>),
                                          std::uint32_t, T>>;

template <class S>
const S* elements(const Array& a) {
  return static_cast<const S*>(a.buffer()->host_data());
}

// Reduces p[0, n) with kLanes independent accumulators held in an
// xtensor_fixed, so each step is one vectorized assignment.
template <class Op, class T>
T reduce_contiguous(const T* p, std::size_t n) {
  constexpr std::size_t kLanes = 256;
  constexpr T kInit = identity<Op, T>();
  if (n < 2 * kLanes) return std::accumulate(p, p + n, kInit, Op{});
  using Lanes = xt::xtensor_fixed<T, xt::xshape<kLanes>>;
  const auto chunk = [p](std::size_t i) {
    return xt::adapt(p + i, kLanes, xt::no_ownership(),
                     std::array<std::size_t, 1>{kLanes});
  };
  Lanes acc = chunk(0);
  std::size_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes) {
    xt::noalias(acc) = xt::detail::make_xfunction<Op>(acc, chunk(i));
  }
  const T lanes = std::accumulate(acc.cbegin(), acc.cend(), kInit, Op{});
  return std::accumulate(p + i, p + n, lanes, Op{});
}

// The input's dims with size-1 dims dropped and neighbours merged when both are
// reduced or both kept.
struct Collapsed {
  ShapeVec extents;
  ShapeVec axes;  // positions in `extents` that are reduced
};

Collapsed collapse(const Shape& shape, const Axes& axes) {
  Collapsed c;
  bool last_reduced = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    const bool reduced = std::find(axes.begin(), axes.end(),
                                   static_cast<std::int64_t>(i)) != axes.end();
    if (!c.extents.empty() && reduced == last_reduced) {
      c.extents.back() *= static_cast<std::size_t>(shape[i]);
    } else {
      c.extents.push_back(static_cast<std::size_t>(shape[i]));
      if (reduced) c.axes.push_back(c.extents.size() - 1);
    }
    last_reduced = reduced;
  }
  return c;
}

// S may be const: inputs are read-only views, outputs writable ones (the
// pointer goes to xt::adapt as a prvalue, which the adaptor copies).
template <class S>
auto flat(S* p, std::size_t n) {
  return xt::adapt(static_cast<S*>(p), n, xt::no_ownership(),
                   std::array<std::size_t, 1>{n});
}

// Below this many kept elements per step, rows are combined element by element
// rather than by one vectorized assignment per row.
constexpr std::size_t kMinRow = 16;

// A contiguous reduction longer than this is reduced as pieces of this many
// elements (the last shorter), each in SIMD lanes, whose results are then
// combined left to right. The pieces depend on the length only, so the
// rounding is the same whichever thread reduces which piece and however many
// threads there are; the pieces are what lets one long row (a full reduction)
// use several threads. Shorter rows are one piece, as before there were
// threads. 64k elements: each piece ends with a serial fold of its 256 lanes,
// which at 16k-element pieces cost ~10% of a one-thread f32 sum.
constexpr std::size_t kPiece = std::size_t{1} << 16;

// Rows at most this long are folded side by side (reduce_short_rows).
constexpr std::size_t kShortRow = 32;

// out[o] = Op over k of in[o, k] for rows of n <= kShortRow elements (a 2x2
// pool's last axis): a block of rows is transposed into k-major order, then
// folded k by k across the block's outputs in SIMD, from the identity as
// reduce_contiguous does (the same bits). Folding one row at a time makes
// every step of max/min a data-dependent branch, mispredicted half the time on
// real data (5-10 ns per element).
template <class Op, class S>
void reduce_short_rows(const S* in, S* out, std::size_t lo, std::size_t hi, std::size_t n) {
  constexpr std::size_t kBlock = 128;
  constexpr S kInit = identity<Op, S>();
  std::vector<S> cols(n * kBlock);
  for (std::size_t o0 = lo; o0 < hi; o0 += kBlock) {
    const std::size_t w = std::min(kBlock, hi - o0);
    const S* base = in + o0 * n;
    for (std::size_t j = 0; j < w; ++j) {
      for (std::size_t k = 0; k < n; ++k) cols[k * w + j] = base[j * n + k];
    }
    S* dst = out + o0;
    std::fill_n(dst, w, kInit);
    auto acc = flat(dst, w);
    for (std::size_t k = 0; k < n; ++k) {
      xt::noalias(acc) = xt::detail::make_xfunction<Op>(acc, flat(cols.data() + k * w, w));
    }
  }
}

// out[o] = Op over k of in[o, k], for an (outer, n) array.
template <class Op, class S>
void reduce_rows(const S* in, S* out, std::size_t outer, std::size_t n) {
  if (n <= kShortRow) {
    parallel_ranges(outer, n, [&](std::size_t lo, std::size_t hi) {
      reduce_short_rows<Op>(in, out, lo, hi, n);
    });
    return;
  }
  if (n <= kPiece) {
    parallel_ranges(outer, n, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t o = lo; o < hi; ++o)
        out[o] = reduce_contiguous<Op>(in + o * n, n);
    });
    return;
  }
  const std::size_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<S> part(outer * pieces);
  parallel_ranges(part.size(), kPiece, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t u = lo; u < hi; ++u) {
      const std::size_t begin = u % pieces * kPiece;
      part[u] = reduce_contiguous<Op>(in + u / pieces * n + begin,
                                      std::min(kPiece, n - begin));
    }
  });
  for (std::size_t o = 0; o < outer; ++o) {
    const S* p = part.data() + o * pieces;
    out[o] = std::accumulate(p + 1, p + pieces, p[0], Op{});
  }
}

// dst[0, w) = Op over k < rows of base[k * stride + (0, w)], folding rows in
// order. `simd`: one vectorized assignment per row (else element by element),
// chosen from the full row length so that a column gives the same bits
// whichever block of columns it is in.
template <class Op, class S>
void fold_rows(const S* base, S* dst, std::size_t rows, std::size_t stride,
               std::size_t w, bool simd) {
  std::copy(base, base + w, dst);
  if (simd) {
    auto acc = flat(dst, w);
    for (std::size_t k = 1; k < rows; ++k) {
      xt::noalias(acc) =
          xt::detail::make_xfunction<Op>(acc, flat(base + k * stride, w));
    }
  } else {
    for (std::size_t k = 1; k < rows; ++k) {
      std::transform(dst, dst + w, base + k * stride, dst, Op{});
    }
  }
}

// Rows per piece of a reduction over a middle dim: about kPiece elements, and
// at least 64 rows.
std::size_t piece_rows(std::size_t inner) {
  return std::max<std::size_t>(64, kPiece / inner);
}

// out[o, i] = Op over k of in[o, k, i], for an (outer, n, inner) array. Each
// output element is a fold over k in order, over at most piece_rows(inner)
// rows at a time: a longer n is folded piece by piece into partial rows, which
// are then folded in order. The pieces depend on the shape only (the same bits
// at every thread count); they let a reduction with few kept rows, such as a
// column sum, use several threads, together with blocks of columns (which
// change nothing: columns are independent).
template <class Op, class S>
void reduce_middle(const S* in, S* out, std::size_t outer, std::size_t n,
                   std::size_t inner) {
  if (inner == 1) return reduce_rows<Op>(in, out, outer, n);
  const bool simd = inner >= kMinRow;
  const std::size_t rows = std::min(n, piece_rows(inner));
  const std::size_t pieces = (n + rows - 1) / rows;
  std::vector<S> part(pieces > 1 ? outer * pieces * inner : 0);
  S* const partial = pieces > 1 ? part.data() : out;
  const ColumnBlocks cb = column_blocks(outer * pieces, rows, inner);
  parallel_ranges(outer * pieces * cb.blocks, rows * cb.width,
                  [&](std::size_t lo, std::size_t hi) {
                    for (std::size_t u = lo; u < hi; ++u) {
                      const std::size_t op = u / cb.blocks;  // o * pieces + p
                      const std::size_t c0 = u % cb.blocks * cb.width;
                      const std::size_t k0 = op % pieces * rows;
                      fold_rows<Op>(in + (op / pieces * n + k0) * inner + c0,
                                    partial + op * inner + c0,
                                    std::min(rows, n - k0), inner,
                                    std::min(cb.width, inner - c0), simd);
                    }
                  });
  if (pieces == 1) return;
  const ColumnBlocks cc = column_blocks(outer, pieces, inner);
  parallel_ranges(outer * cc.blocks, pieces * cc.width,
                  [&](std::size_t lo, std::size_t hi) {
                    for (std::size_t u = lo; u < hi; ++u) {
                      const std::size_t o = u / cc.blocks;
                      const std::size_t c0 = u % cc.blocks * cc.width;
                      fold_rows<Op>(partial + o * pieces * inner + c0,
                                    out + o * inner + c0, pieces, inner,
                                    std::min(cc.width, inner - c0), simd);
                    }
                  });
}

// Reduces the runs of c.axes one at a time, the last first (each pass shrinks
// the data, so the first pass dominates). xt::reduce is not used: besides
// accumulating serially, xtensor 0.24 built as C++20 types the result of a
// dynamic-rank reduction as a rank-4 xtensor (its xtype_for_shape guard only
// covers C++17) and writes out of bounds.
template <class Op, class S>
void reduce_kernel(const S* in, S* out, std::size_t out_size,
                   const Collapsed& c) {
  if (c.axes.empty()) {  // only size-1 dims were reduced
    std::memcpy(out, in, out_size * sizeof(S));
    return;
  }
  ShapeVec extents = c.extents;
  std::vector<S> scratch[2];
  const S* src = in;
  for (std::size_t j = c.axes.size(); j-- > 0;) {
    const std::size_t ax = c.axes[j];
    const auto product = [&](std::size_t from, std::size_t to) {
      return std::accumulate(
          extents.begin() + static_cast<std::ptrdiff_t>(from),
          extents.begin() + static_cast<std::ptrdiff_t>(to), std::size_t{1},
          std::multiplies<>());
    };
    const std::size_t outer = product(0, ax);
    const std::size_t inner = product(ax + 1, extents.size());
    S* dst = out;
    if (j > 0) {
      scratch[j % 2].resize(outer * inner);
      dst = scratch[j % 2].data();
    }
    reduce_middle<Op>(src, dst, outer, extents[ax], inner);
    extents.erase(extents.begin() + static_cast<std::ptrdiff_t>(ax));
    src = dst;
  }
}

// Whether x replaces best as the extreme so far: NaN first, then the first
// occurrence of the largest (smallest) value.
template <bool kMax, class S>
bool better(S x, S best) {
  const bool x_nan = x != x;  // NOLINT: NaN test (always false for integers)
  const bool best_nan = best != best;
  if (best_nan) return false;
  return x_nan || (kMax ? x > best : x < best);
}

// The first extreme of p[0, n): its index and value.
template <bool kMax, class S>
std::pair<std::size_t, S> arg_extreme(const S* p, std::size_t n) {
  std::pair<std::size_t, S> r{0, p[0]};
  for (std::size_t k = 1; k < n; ++k) {
    if (better<kMax>(p[k], r.second)) r = {k, p[k]};
  }
  return r;
}

// Index of the first extreme value along the middle dim of (outer, n, inner),
// NaN first. xt::argmax is not used: it copies non-leading axes, ignores NaN,
// and in xtensor 0.24 answers argmin for 1-D input. A long extent is scanned
// in pieces (kPiece elements of a contiguous row, piece_rows() rows of a
// middle dim) on several threads; a later piece's extreme replaces an earlier
// one's only if `better`, which gives the index a scan of the whole extent
// gives (unlike sums, no bit depends on the pieces).
template <bool kMax, class S>
void arg_reduce_kernel(const S* in, std::int32_t* out, std::size_t outer,
                       std::size_t n, std::size_t inner) {
  if (inner == 1 && n > kPiece) {
    const std::size_t pieces = (n + kPiece - 1) / kPiece;
    std::vector<std::pair<std::size_t, S>> part(outer * pieces);
    parallel_ranges(part.size(), kPiece, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t u = lo; u < hi; ++u) {
        const std::size_t begin = u % pieces * kPiece;
        part[u] = arg_extreme<kMax>(in + u / pieces * n + begin,
                                    std::min(kPiece, n - begin));
        part[u].first += begin;
      }
    });
    for (std::size_t o = 0; o < outer; ++o) {
      std::pair<std::size_t, S> r = part[o * pieces];
      for (std::size_t q = 1; q < pieces; ++q) {
        if (better<kMax>(part[o * pieces + q].second, r.second))
          r = part[o * pieces + q];
      }
      out[o] = static_cast<std::int32_t>(r.first);
    }
    return;
  }
  if (inner == 1) {
    parallel_ranges(outer, n, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t o = lo; o < hi; ++o) {
        out[o] =
            static_cast<std::int32_t>(arg_extreme<kMax>(in + o * n, n).first);
      }
    });
    return;
  }
  // A middle dim: pieces of piece_rows(inner) rows (and blocks of columns)
  // give each column's first extreme within them; the pieces' are combined in
  // order, as for long rows.
  const std::size_t rows = std::min(n, piece_rows(inner));
  const std::size_t pieces = (n + rows - 1) / rows;
  std::vector<S> best(outer * pieces * inner);
  std::vector<std::int32_t> where(pieces > 1 ? best.size() : 0);
  std::int32_t* const at = pieces > 1 ? where.data() : out;
  const ColumnBlocks cb = column_blocks(outer * pieces, rows, inner);
  parallel_ranges(
      outer * pieces * cb.blocks, rows * cb.width,
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t u = lo; u < hi; ++u) {
          const std::size_t op = u / cb.blocks;  // o * pieces + p
          const std::size_t c0 = u % cb.blocks * cb.width;
          const std::size_t w = std::min(cb.width, inner - c0);
          const std::size_t k0 = op % pieces * rows;
          const std::size_t k1 = std::min(n, k0 + rows);
          const S* base = in + op / pieces * n * inner + c0;
          S* b = best.data() + op * inner + c0;
          std::int32_t* idx = at + op * inner + c0;
          std::copy(base + k0 * inner, base + k0 * inner + w, b);
          std::fill(idx, idx + w, static_cast<std::int32_t>(k0));
          for (std::size_t k = k0 + 1; k < k1; ++k) {
            const S* row = base + k * inner;
            for (std::size_t i = 0; i < w; ++i) {
              if (better<kMax>(row[i], b[i])) {
                b[i] = row[i];
                idx[i] = static_cast<std::int32_t>(k);
              }
            }
          }
        }
      });
  if (pieces == 1) return;
  const ColumnBlocks cc = column_blocks(outer, pieces, inner);
  parallel_ranges(
      outer * cc.blocks, pieces * cc.width,
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t u = lo; u < hi; ++u) {
          const std::size_t o = u / cc.blocks;
          const std::size_t c0 = u % cc.blocks * cc.width;
          const std::size_t w = std::min(cc.width, inner - c0);
          S* b = best.data() + o * pieces * inner + c0;  // piece 0's, updated
          const std::int32_t* idx = at + o * pieces * inner + c0;
          std::int32_t* dst = out + o * inner + c0;
          std::copy(idx, idx + w, dst);
          for (std::size_t p = 1; p < pieces; ++p) {
            const S* pb = b + p * inner;
            const std::int32_t* pi = idx + p * inner;
            for (std::size_t i = 0; i < w; ++i) {
              if (better<kMax>(pb[i], b[i])) {
                b[i] = pb[i];
                dst[i] = pi[i];
              }
            }
          }
        }
      });
}

void check_reduce_dtype(Prim p, DType d) {
  if (is_16bit_float(d)) {
    throw DTypeError(
        detail::str_cat("[", name(p), "] ", name(d),
                        " is not supported by the CPU kernels; reduce in "
                        "f32 (astype on a device with f16)"));
  }
}

}  // namespace

std::shared_ptr<Buffer> eval_reduce(Prim p, const Params& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  const Array& a = inputs[0];
  check_reduce_dtype(p, a.dtype());
  auto buf = allocate(out);
  const auto out_size = static_cast<std::size_t>(numel(out.shape));
  if (out_size == 0) return buf;
  if (a.size() == 0) {  // sum/prod over an empty extent (max/min were refused by the op)
    if (p == Prim::kProd) {
      visit_dtype(out.dtype, [&](auto zero) {
        using T = decltype(zero);
        std::fill_n(static_cast<T*>(buf->host_data()), out_size, T{1});
      });
    } else {
      std::memset(buf->host_data(), 0, buf->nbytes());
    }
    return buf;
  }
  const Collapsed c = collapse(a.shape(), params.as<ReduceParams>().axes);
  const auto run = [&]<class Op>(Op) {
    visit_dtype(a.dtype(), [&](auto zero) {
      using S = Stored<decltype(zero), Op>;
      if constexpr ((std::is_same_v<Op, Plus> || std::is_same_v<Op, Times>) &&
                    std::is_same_v<decltype(zero), bool>) {
        throw DTypeError(detail::str_cat("[", name(p),
                                         "] the CPU backend does not reduce bool; astype first"));
      } else {
        reduce_kernel<Op>(elements<S>(a), static_cast<S*>(buf->host_data()),
                          out_size, c);
      }
    });
  };
  visit_family<PrimFamily::kReduce>(p, [&]<Prim P>(PrimC<P>) {
    if constexpr (P == Prim::kSum) {
      run(Plus{});
    } else if constexpr (P == Prim::kMax) {
      run(NanMax{});
    } else if constexpr (P == Prim::kMin) {
      run(NanMin{});
    } else if constexpr (P == Prim::kProd) {
      run(Times{});
    } else {
      static_assert(kUnhandled<P>, "a reduction without a CPU kernel");
    }
  });
  return buf;
}

std::shared_ptr<Buffer> eval_arg_reduce(Prim p, const Params& params,
                                        std::span<const Array> inputs,
                                        const Aval& out) {
  const Array& a = inputs[0];
  check_reduce_dtype(p, a.dtype());
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const auto axis = static_cast<std::size_t>(params.as<ArgReduceParams>().axis);
  std::size_t outer = 1;
  std::size_t inner = 1;
  for (std::size_t i = 0; i < axis; ++i)
    outer *= static_cast<std::size_t>(a.shape()[i]);
  for (std::size_t i = axis + 1; i < a.shape().size(); ++i) {
    inner *= static_cast<std::size_t>(a.shape()[i]);
  }
  const auto n = static_cast<std::size_t>(a.shape()[axis]);
  auto* idx = static_cast<std::int32_t*>(buf->host_data());
  visit_dtype(a.dtype(), [&](auto zero) {
    using S = Stored<decltype(zero), NanMax>;
    visit_family<PrimFamily::kArgReduce>(p, [&]<Prim P>(PrimC<P>) {
      if constexpr (P == Prim::kArgmax) {
        arg_reduce_kernel<true>(elements<S>(a), idx, outer, n, inner);
      } else if constexpr (P == Prim::kArgmin) {
        arg_reduce_kernel<false>(elements<S>(a), idx, outer, n, inner);
      } else {
        static_assert(kUnhandled<P>, "an index reduction without a CPU kernel");
      }
    });
  });
  return buf;
}

}  // namespace kiln::cpu
