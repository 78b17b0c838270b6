// CPU kernels for layout primitives: reshape, transpose, broadcast_to,
// concatenate, slice. They move elements without looking at them, so each is
// written once over the element size (bits.hpp). Arrays are immutable, so a
// result with the same elements in the same order (reshape, identity transpose
// or slice) shares the input's buffer instead of copying it.
//
// transpose, slice and broadcast_to are one operation: fill a contiguous output
// from a strided view of the input. That walk is written out here rather than
// assigned through xt::transpose / xt::strided_view / xt::broadcast because
// xtensor steps those views element by element: on 2048x2048 f32 it took 40 ms
// for a transpose and 49 ms for a column concatenate, against 10 ms and 15 ms
// (allocation and first touch included) for the loops below.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/parallel.hpp"

namespace kiln::cpu {
namespace {

// Calls f(offset, k) for k in [k0, k1) (indices into the first `dims` dims of
// `shape`, row-major), with offset = sum of index[d] * strides[d] over those
// dims.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, std::size_t dims,
                     std::int64_t k0, std::int64_t k1, F&& f) {
  Shape pos(dims, 0);
  std::int64_t offset = 0;
  for (std::size_t d = dims, rest = static_cast<std::size_t>(k0); d-- > 0;) {
    pos[d] =
        static_cast<std::int64_t>(rest % static_cast<std::size_t>(shape[d]));
    rest /= static_cast<std::size_t>(shape[d]);
    offset += pos[d] * strides[d];
  }
  for (std::int64_t k = k0; k < k1; ++k) {
    f(offset, k);
    for (std::size_t d = dims; d-- > 0;) {  // odometer step
      offset += strides[d];
      if (++pos[d] < shape[d]) break;
      offset -= strides[d] * pos[d];
      pos[d] = 0;
    }
  }
}

// Rows of this many elements or more are split into pieces this long, so that
// a few long rows still spread over threads.
constexpr std::int64_t kRowPiece = std::int64_t{1} << 14;

// out (m x n, contiguous) [i, j] = in[i + j * s] for rows i in [i0, i1): the
// last two axes swapped. A row-by-row walk would read a whole column per
// output row; 32x32 tiles keep the columns being read in cache.
constexpr std::int64_t kTile = 32;
template <class U>
void copy_swapped(const U* in, std::int64_t i0, std::int64_t i1, std::int64_t n,
                  std::int64_t s, U* out) {
  for (std::int64_t j0 = 0; j0 < n; j0 += kTile) {
    const std::int64_t j1 = std::min(n, j0 + kTile);
    for (std::int64_t i = i0; i < i1; ++i) {
      for (std::int64_t j = j0; j < j1; ++j) out[i * n + j] = in[i + j * s];
    }
  }
}

// dst (contiguous, `shape`) [i...] = src[sum i[d] * strides[d]]; a stride of 0
// repeats (broadcasts) that dim. Large copies are split over the thread pool
// by strips of 32 output rows (swapped axes), whole rows, or pieces of long
// rows: each element is copied, so the split cannot change a bit.
template <class U>
void copy_strided(const U* src, const Shape& shape, const Shape& strides,
                  U* dst) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    *dst = *src;
    return;
  }
  const std::int64_t n = shape[rank - 1];
  const std::int64_t s = strides[rank - 1];
  const auto u64 = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  if (rank >= 2 && s != 1 && strides[rank - 2] == 1) {
    const std::int64_t m = shape[rank - 2];
    const std::int64_t strips = (m + kTile - 1) / kTile;
    const std::int64_t blocks = numel(shape) / (m * n);
    parallel_ranges(u64(blocks * strips), u64(kTile * n),
                    [&](std::size_t lo, std::size_t hi) {
                      for (auto u = static_cast<std::int64_t>(lo);
                           u < static_cast<std::int64_t>(hi); ++u) {
                        const std::int64_t i0 = u % strips * kTile;
                        for_each_offset(shape, strides, rank - 2, u / strips,
                                        u / strips + 1,
                                        [&](std::int64_t off, std::int64_t k) {
                                          copy_swapped(src + off, i0,
                                                       std::min(m, i0 + kTile),
                                                       n, s, dst + k * m * n);
                                        });
                      }
                    });
    return;
  }
  // out[j0, j1) of row k, which starts at src[off].
  const auto copy_row = [&](std::int64_t off, std::int64_t k, std::int64_t j0,
                            std::int64_t j1) {
    const U* in = src + off;
    U* out = dst + k * n;
    if (s == 1) {
      std::copy(in + j0, in + j1, out + j0);
    } else if (s == 0) {
      std::fill(out + j0, out + j1, *in);
    } else {
      for (std::int64_t j = j0; j < j1; ++j) out[j] = in[j * s];
    }
  };
  const std::int64_t rows = numel(shape) / n;
  if (n < 2 * kRowPiece) {
    parallel_ranges(u64(rows), u64(n), [&](std::size_t lo, std::size_t hi) {
      for_each_offset(
          shape, strides, rank - 1, static_cast<std::int64_t>(lo),
          static_cast<std::int64_t>(hi),
          [&](std::int64_t off, std::int64_t k) { copy_row(off, k, 0, n); });
    });
    return;
  }
  const std::int64_t pieces = (n + kRowPiece - 1) / kRowPiece;
  parallel_ranges(
      u64(rows * pieces), u64(kRowPiece), [&](std::size_t lo, std::size_t hi) {
        for (auto u = static_cast<std::int64_t>(lo);
             u < static_cast<std::int64_t>(hi); ++u) {
          const std::int64_t j0 = u % pieces * kRowPiece;
          for_each_offset(shape, strides, rank - 1, u / pieces, u / pieces + 1,
                          [&](std::int64_t off, std::int64_t k) {
                            copy_row(off, k, j0, std::min(n, j0 + kRowPiece));
                          });
        }
      });
}

// Runs copy_strided from `in` (starting `offset` elements in) into a new
// buffer.
std::shared_ptr<Buffer> gather(const Array& in, std::int64_t offset,
                               const Shape& strides, const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    copy_strided(host_elements<U>(in) + offset, out.shape, strides,
                 static_cast<U*>(buf->host_data()));
  });
  return buf;
}

std::shared_ptr<Buffer> transpose(const TransposeParams& params, const Array& in,
                                  const Aval& out) {
  const Shape in_strides = row_major_strides(in.shape());
  Shape strides;
  bool identity = true;
  for (std::size_t i = 0; i < params.perm.size(); ++i) {
    strides.push_back(in_strides[params.perm[i]]);
    identity = identity && params.perm[i] == static_cast<std::int64_t>(i);
  }
  if (identity) return in.buffer();
  return gather(in, 0, strides, out);
}

std::shared_ptr<Buffer> broadcast_to(const Array& in, const Aval& out) {
  if (in.shape() == out.shape) return in.buffer();
  // Right-align the input's dims; new leading dims and size-1 dims repeat.
  const Shape in_strides = row_major_strides(in.shape());
  const std::size_t lead = out.shape.size() - in.shape().size();
  Shape strides(out.shape.size(), 0);
  for (std::size_t d = 0; d < in.shape().size(); ++d) {
    if (in.shape()[d] != 1) strides[lead + d] = in_strides[d];
  }
  return gather(in, 0, strides, out);
}

std::shared_ptr<Buffer> slice(const SliceParams& params, const Array& in,
                              const Aval& out) {
  const Shape& shape = in.shape();
  const Shape in_strides = row_major_strides(shape);
  bool whole = true;
  std::int64_t offset = 0;
  Shape strides(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    whole = whole && params.starts[d] == 0 && out.shape[d] == shape[d];
    offset += params.starts[d] * in_strides[d];
    strides[d] = params.steps[d] * in_strides[d];
  }
  if (whole) return in.buffer();
  return gather(in, offset, strides, out);
}

// Every input, and the output, is viewed as (outer, axis extent * inner): each
// input then fills a band of columns, one contiguous run per row. Large ones
// are split over the thread pool by output rows or pieces of long rows.
std::shared_ptr<Buffer> concatenate(const AxisParams& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < params.axis; ++d) outer *= out.shape[d];
  const std::int64_t row = numel(out.shape) / outer;
  const std::int64_t pieces = (row + kRowPiece - 1) / kRowPiece;
  const std::int64_t piece = (row + pieces - 1) / pieces;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    U* dst = static_cast<U*>(buf->host_data());
    std::vector<const U*> src;
    for (const Array& in : inputs) src.push_back(host_elements<U>(in));
    const auto units = static_cast<std::size_t>(outer * pieces);
    parallel_ranges(units, static_cast<std::size_t>(piece),
                    [&](std::size_t lo, std::size_t hi) {
                      for (auto u = static_cast<std::int64_t>(lo);
                           u < static_cast<std::int64_t>(hi); ++u) {
                        // Columns [c0, c1) of row o, from each input's band
                        // that meets them.
                        const std::int64_t o = u / pieces;
                        const std::int64_t c0 = u % pieces * piece;
                        const std::int64_t c1 = std::min(row, c0 + piece);
                        std::int64_t column = 0;
                        for (std::size_t i = 0;
                             i < inputs.size() && column < c1; ++i) {
                          const std::int64_t width = inputs[i].size() / outer;
                          const std::int64_t from = std::max(c0, column);
                          const std::int64_t to = std::min(c1, column + width);
                          if (from < to) {
                            std::copy(src[i] + o * width + (from - column),
                                      src[i] + o * width + (to - column),
                                      dst + o * row + from);
                          }
                          column += width;
                        }
                      }
                    });
  });
  return buf;
}

}  // namespace

std::shared_ptr<Buffer> eval_layout(Prim p, const Params& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  return visit_family<PrimFamily::kLayout>(p, [&]<Prim P>(PrimC<P>) {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kReshape) {
      return inputs[0].buffer();  // same elements, same order
    } else if constexpr (P == Prim::kTranspose) {
      return transpose(q, inputs[0], out);
    } else if constexpr (P == Prim::kBroadcastTo) {
      return broadcast_to(inputs[0], out);
    } else if constexpr (P == Prim::kConcatenate) {
      return concatenate(q, inputs, out);
    } else if constexpr (P == Prim::kSlice) {
      return slice(q, inputs[0], out);
    } else {
      static_assert(kUnhandled<P>, "a layout primitive without a CPU kernel");
    }
  });
}

}  // namespace kiln::cpu
