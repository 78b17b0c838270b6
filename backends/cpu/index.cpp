// CPU kernels for indexing primitives: take, take_along_axis, one_hot and the
// scatters. Gathers
// are plain loops over contiguous runs (clearer and faster here than an xtensor
// expression), written once over the element size (bits.hpp). Large gathers
// and scatters are split over the thread pool (parallel.hpp) by output rows,
// columns or (scatters) destination rows; a scatter applies each slot's
// updates in order on one thread, so repeated indices sum the same way at
// every thread count. Index values are
// only known now, so the range check that the shape rule cannot do happens
// here, before anything is written: an IndexError leaves no partial result
// behind.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/parallel.hpp"

namespace kiln::cpu {
namespace {

// Reads index values (i32 or u32) as int64.
std::vector<std::int64_t> read_indices(const Array& indices) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(indices.size()));
  if (indices.dtype() == DType::kI32) {
    std::copy_n(indices.data<std::int32_t>(), out.size(), out.begin());
  } else {
    std::copy_n(indices.data<std::uint32_t>(), out.size(), out.begin());
  }
  return out;
}

// Maps negative indices onto [0, n) and rejects the rest of the out-of-range
// ones.
void normalize_indices(Prim p, std::vector<std::int64_t>& idx,
                       std::int64_t axis, std::int64_t n) {
  for (auto& i : idx) {
    if (i < -n || i >= n) {
      throw IndexError(detail::str_cat("[", name(p), "] index ", i,
                                       " is out of range for axis ", axis,
                                       " of size ", n));
    }
    if (i < 0) i += n;
  }
}

// out[o, j, :] = a[o, idx[j], :] with the array viewed as (outer, n, inner).
std::shared_ptr<Buffer> take(const AxisParams& params, const Array& a,
                             const Array& indices, const Aval& out) {
  const auto axis = static_cast<std::size_t>(params.axis);
  const Shape& shape = a.shape();
  const std::int64_t n = shape[axis];
  auto idx = read_indices(indices);
  normalize_indices(Prim::kTake, idx, params.axis, n);
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::size_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  // Output rows (o, j) of `inner` elements, split over the thread pool when
  // there are many.
  const std::size_t rows = outer * idx.size();
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    const U* src = host_elements<U>(a);
    U* out_rows = static_cast<U*>(buf->host_data());
    parallel_ranges(rows, inner, [&](std::size_t lo, std::size_t hi) {
      U* dst = out_rows + lo * inner;
      for (std::size_t r = lo; r < hi;) {
        const std::size_t o = r / idx.size();
        const U* block = src + o * static_cast<std::size_t>(n) * inner;
        const std::size_t j1 = std::min(idx.size(), hi - o * idx.size());
        if (inner ==
            1) {  // a gather of single elements: skip copy_n's overhead
          for (std::size_t j = r % idx.size(); j < j1; ++j)
            *dst++ = block[idx[j]];
        } else {
          for (std::size_t j = r % idx.size(); j < j1; ++j) {
            dst = std::copy_n(block + static_cast<std::size_t>(idx[j]) * inner,
                              inner, dst);
          }
        }
        r = o * idx.size() + j1;
      }
    });
  });
  return buf;
}

// out[..., j, ...] = a[..., idx[..., j, ...], ...] where the non-axis dims of
// `a` and of the indices broadcast to the output's (stride 0 on a size-1 dim).
std::shared_ptr<Buffer> take_along_axis(const AxisParams& params, const Array& a,
                                        const Array& indices, const Aval& out) {
  const auto axis = static_cast<std::size_t>(params.axis);
  const std::int64_t n = a.shape()[axis];
  auto idx = read_indices(indices);
  normalize_indices(Prim::kTakeAlongAxis, idx, params.axis, n);
  auto buf = allocate(out);
  const std::size_t total = static_cast<std::size_t>(numel(out.shape));
  if (total == 0) return buf;
  const std::size_t rank = out.shape.size();
  Shape a_strides = row_major_strides(a.shape());
  Shape i_strides = row_major_strides(indices.shape());
  for (std::size_t d = 0; d < rank; ++d) {
    if (a.shape()[d] == 1) a_strides[d] = 0;
    if (indices.shape()[d] == 1) i_strides[d] = 0;
  }
  const std::int64_t a_axis_stride = a_strides[axis];
  a_strides[axis] = 0;  // the axis position comes from the index value
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    const U* src = host_elements<U>(a);
    U* dst = static_cast<U*>(buf->host_data());
    // Odometer over all but the last output dim; the last dim is a tight loop.
    // Large outputs are split over the thread pool by ranges of rows.
    const std::size_t outer_dims = rank - 1;
    const std::int64_t len = out.shape[rank - 1];
    const std::int64_t a_last = a_strides[rank - 1];
    const std::int64_t i_last = i_strides[rank - 1];
    const auto ulen = static_cast<std::size_t>(len);
    parallel_ranges(total / ulen, ulen, [&](std::size_t lo, std::size_t hi) {
      Shape pos(outer_dims, 0);
      std::int64_t a_off = 0;
      std::int64_t i_off = 0;
      for (std::size_t d = outer_dims, rest = lo; d-- > 0;) {
        pos[d] = static_cast<std::int64_t>(
            rest % static_cast<std::size_t>(out.shape[d]));
        rest /= static_cast<std::size_t>(out.shape[d]);
        a_off += pos[d] * a_strides[d];
        i_off += pos[d] * i_strides[d];
      }
      for (std::size_t k = lo * ulen; k < hi * ulen; k += ulen) {
        for (std::int64_t j = 0; j < len; ++j) {
          const auto at = static_cast<std::size_t>(i_off + j * i_last);
          dst[k + static_cast<std::size_t>(j)] =
              src[a_off + j * a_last + idx[at] * a_axis_stride];
        }
        for (std::size_t d = outer_dims; d-- > 0;) {
          a_off += a_strides[d];
          i_off += i_strides[d];
          if (++pos[d] < out.shape[d]) break;
          a_off -= a_strides[d] * pos[d];
          i_off -= i_strides[d] * pos[d];
          pos[d] = 0;
        }
      }
    });
  });
  return buf;
}

// Out-of-range indices (negative ones included) leave their row all zero.
std::shared_ptr<Buffer> one_hot(const OneHotParams& params, const Array& indices,
                                const Aval& out) {
  const auto idx = read_indices(indices);
  const std::int64_t depth = params.depth;
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::memset(buf->host_data(), 0, buf->nbytes());
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* dst = static_cast<T*>(buf->host_data());
    for (std::size_t r = 0; r < idx.size(); ++r) {
      if (idx[r] >= 0 && idx[r] < depth) {
        dst[r * static_cast<std::size_t>(depth) +
            static_cast<std::size_t>(idx[r])] = T{1};
      }
    }
  });
  return buf;
}

// The scatters: out = a, then each (outer, inner) column applies its updates
// in index order (k ascending), the order the Vulkan kernel uses too, so both
// backends sum repeated indices identically. kScatterAddAlongAxis reads an
// index per element (indices shaped like the updates); the others one per k.
std::shared_ptr<Buffer> scatter(Prim p, const AxisParams& params, std::span<const Array> in,
                                const Aval& out) {
  const Array& a = in[0];
  const Array& upd = in[2];
  const auto axis = static_cast<std::size_t>(params.axis);
  const Shape& shape = a.shape();
  const std::int64_t n = shape[axis];
  auto idx = read_indices(in[1]);
  normalize_indices(p, idx, params.axis, n);
  if (is_16bit_float(out.dtype)) {
    throw DTypeError(detail::str_cat("[", name(p), "] ", name(out.dtype),
                                     " is not supported by the CPU kernels; compute in f32"));
  }
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::memcpy(buf->host_data(), a.buffer()->host_data(), buf->nbytes());
  std::size_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::size_t k_count = static_cast<std::size_t>(upd.size()) / std::max<std::size_t>(outer * inner, 1);
  const bool per_element = p == Prim::kScatterAddAlongAxis;
  const bool add = p != Prim::kScatter;
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* u = upd.data<T>();
    T* dst = static_cast<T*>(buf->host_data());
    // out[o, i, q] += u: slot (o, i, q) receives updates only from column
    // (o, q), in k order. Blocks of columns can go to different threads, each
    // applying its updates in k order; with too few of them (rows narrower
    // than 32k, one outer index: an embedding gradient), and one index per
    // row of updates, the destination rows are split instead, each task
    // applying in k order only the updates of the rows it owns. Either way
    // each slot sums the same updates in the same order at every thread count.
    const auto apply = [&](T* row, const T* src, std::size_t q0,
                           std::size_t q1) {
      for (std::size_t q = q0; q < q1; ++q) {
        if constexpr (std::is_same_v<T, bool>) {
          row[q] = src[q];
        } else {
          row[q] = add ? static_cast<T>(row[q] + src[q]) : src[q];
        }
      }
    };
    const ColumnBlocks cb = column_blocks(outer, k_count, inner);
    const std::size_t un = static_cast<std::size_t>(n);
    if (!per_element &&
        outer * cb.blocks < outer * k_count * inner / kTaskGrain) {
      parallel_ranges(
          outer * un, std::max<std::size_t>(1, k_count * inner / un),
          [&](std::size_t lo, std::size_t hi) {
            for (std::size_t o = lo / un; o * un < hi; ++o) {
              const auto r0 =
                  static_cast<std::int64_t>(std::max(lo, o * un) - o * un);
              const auto r1 = static_cast<std::int64_t>(
                  std::min(hi, (o + 1) * un) - o * un);
              T* block = dst + o * un * inner;
              for (std::size_t k = 0; k < k_count; ++k) {
                if (idx[k] < r0 || idx[k] >= r1) continue;
                apply(block + static_cast<std::size_t>(idx[k]) * inner,
                      u + (o * k_count + k) * inner, 0, inner);
              }
            }
          });
      return;
    }
    parallel_ranges(
        outer * cb.blocks, k_count * cb.width,
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t unit = lo; unit < hi; ++unit) {
            const std::size_t o = unit / cb.blocks;
            const std::size_t q0 = unit % cb.blocks * cb.width;
            const std::size_t q1 = std::min(inner, q0 + cb.width);
            T* block = dst + o * un * inner;
            for (std::size_t k = 0; k < k_count; ++k) {
              const T* src = u + (o * k_count + k) * inner;
              if (!per_element) {
                apply(block + static_cast<std::size_t>(idx[k]) * inner, src, q0,
                      q1);
                continue;
              }
              const std::int64_t* ik = &idx[(o * k_count + k) * inner];
              for (std::size_t q = q0; q < q1; ++q) {
                apply(block + static_cast<std::size_t>(ik[q]) * inner, src, q,
                      q + 1);
              }
            }
          }
        });
  });
  return buf;
}

}  // namespace

std::shared_ptr<Buffer> eval_index(Prim p, const Params& params,
                                   std::span<const Array> inputs,
                                   const Aval& out) {
  return visit_family<PrimFamily::kIndex>(p, [&]<Prim P>(PrimC<P>) {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kTake) {
      return take(q, inputs[0], inputs[1], out);
    } else if constexpr (P == Prim::kTakeAlongAxis) {
      return take_along_axis(q, inputs[0], inputs[1], out);
    } else if constexpr (P == Prim::kOneHot) {
      return one_hot(q, inputs[0], out);
    } else if constexpr (P == Prim::kScatter || P == Prim::kScatterAdd ||
                         P == Prim::kScatterAddAlongAxis) {
      return scatter(P, q, inputs, out);
    } else {
      static_assert(kUnhandled<P>, "an index primitive without a CPU kernel");
    }
  });
}

}  // namespace kiln::cpu
