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

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {
namespace {

// Calls f(offset, k) for k in [0, numel(shape[:dims])) in row-major order, with
// offset = sum of index[d] * strides[d] over the first `dims` dims.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, std::size_t dims,
                     F&& f) {
  std::int64_t count = 1;
  for (std::size_t d = 0; d < dims; ++d) count *= shape[d];
  Shape pos(dims, 0);
  std::int64_t offset = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    f(offset, k);
    for (std::size_t d = dims; d-- > 0;) {  // odometer step
      offset += strides[d];
      if (++pos[d] < shape[d]) break;
      offset -= strides[d] * pos[d];
      pos[d] = 0;
    }
  }
}

// out (m x n, contiguous) [i, j] = in[i + j * s]: the last two axes swapped. A
// row-by-row walk would read a whole column per output row; 32x32 tiles keep
// the columns being read in cache.
template <class U>
void copy_swapped(const U* in, std::int64_t m, std::int64_t n, std::int64_t s,
                  U* out) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t i0 = 0; i0 < m; i0 += kTile) {
    const std::int64_t i1 = std::min(m, i0 + kTile);
    for (std::int64_t j0 = 0; j0 < n; j0 += kTile) {
      const std::int64_t j1 = std::min(n, j0 + kTile);
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) out[i * n + j] = in[i + j * s];
      }
    }
  }
}

// dst (contiguous, `shape`) [i...] = src[sum i[d] * strides[d]]; a stride of 0
// repeats (broadcasts) that dim.
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
  if (rank >= 2 && s != 1 && strides[rank - 2] == 1) {
    const std::int64_t m = shape[rank - 2];
    for_each_offset(shape, strides, rank - 2,
                    [&](std::int64_t off, std::int64_t k) {
                      copy_swapped(src + off, m, n, s, dst + k * m * n);
                    });
    return;
  }
  for_each_offset(shape, strides, rank - 1,
                  [&](std::int64_t off, std::int64_t k) {
                    const U* in = src + off;
                    U* out = dst + k * n;
                    if (s == 1) {
                      std::copy_n(in, n, out);
                    } else if (s == 0) {
                      std::fill_n(out, n, *in);
                    } else {
                      for (std::int64_t j = 0; j < n; ++j) out[j] = in[j * s];
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
// input then fills a band of columns, one contiguous run per row.
std::shared_ptr<Buffer> concatenate(const AxisParams& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < params.axis; ++d) outer *= out.shape[d];
  const std::int64_t row = numel(out.shape) / outer;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    U* dst = static_cast<U*>(buf->host_data());
    std::int64_t column = 0;
    for (const Array& in : inputs) {
      const std::int64_t width = in.size() / outer;
      const U* src = host_elements<U>(in);
      for (std::int64_t o = 0; o < outer; ++o) {
        std::copy_n(src + o * width, width, dst + o * row + column);
      }
      column += width;
    }
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
