// Iteration plan for broadcasting CPU kernels (elementwise binary ops, where).
// Internal to the CPU backend.
//
// The output's size-1 dims are dropped and neighbouring dims merged wherever
// every operand is either full in both or broadcast in both: (8, 4, 5) + (4, 5)
// becomes (8, 20) + (20,), and (64, 512) - (64, 1) stays (64, 512) - (64, 1).
// The kernel then runs once per contiguous output row, where each operand is
// either a contiguous row or one broadcast element, which is the flat SIMD path
// again.
#pragma once

#include <array>
#include <cstddef>
#include <xtensor/xstorage.hpp>

#include "kiln/runtime/shape.hpp"

namespace kiln::cpu {

using ShapeVec = xt::svector<std::size_t, 6>;

template <std::size_t K>
struct BroadcastPlan {
  ShapeVec extents;  // merged output dims, row-major
  std::array<ShapeVec, K>
      strides;  // per operand, in elements; 0 where it broadcasts

  // `out` is the broadcast of the operand shapes `in` (already checked).
  static BroadcastPlan make(const Shape& out,
                            const std::array<const Shape*, K>& in) {
    BroadcastPlan plan;
    xt::svector<std::array<bool, K>, 6>
        full;  // per merged dim: is operand k full?
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto extent = static_cast<std::size_t>(out[i]);
      if (extent == 1) continue;
      std::array<bool, K> f;
      for (std::size_t k = 0; k < K; ++k) {
        const Shape& s = *in[k];
        const std::size_t lead = out.size() - s.size();
        f[k] = i >= lead && s[i - lead] != 1;
      }
      if (!full.empty() && full.back() == f) {
        plan.extents.back() *= extent;
      } else {
        plan.extents.push_back(extent);
        full.push_back(f);
      }
    }
    const std::size_t rank = plan.extents.size();
    for (std::size_t k = 0; k < K; ++k) {
      plan.strides[k].resize(rank);
      std::size_t acc = 1;
      for (std::size_t d = rank; d-- > 0;) {
        plan.strides[k][d] = full[d][k] ? acc : 0;
        if (full[d][k]) acc *= plan.extents[d];
      }
    }
    return plan;
  }

  std::size_t row_length() const {
    return extents.empty() ? 1 : extents.back();
  }

  // Operand k's extents in the merged dims (1 where it broadcasts).
  ShapeVec operand_extents(std::size_t k) const {
    ShapeVec e = extents;
    for (std::size_t d = 0; d < e.size(); ++d) {
      if (strides[k][d] == 0) e[d] = 1;
    }
    return e;
  }

  // Calls fn(offsets, steps, out_offset, length) for each contiguous output
  // row: operand k's row starts at element offsets[k] and advances by steps[k]
  // (0 or 1).
  template <class RowFn>
  void for_each_row(RowFn&& fn) const {
    const std::size_t rank = extents.size();
    const std::size_t len = row_length();
    std::array<std::size_t, K> off{};
    std::array<std::size_t, K> step;
    for (std::size_t k = 0; k < K; ++k)
      step[k] = rank == 0 ? 1 : strides[k][rank - 1];
    std::size_t rows = 1;
    for (std::size_t d = 0; d + 1 < rank; ++d) rows *= extents[d];
    ShapeVec idx(rank > 0 ? rank - 1 : 0, 0);
    for (std::size_t r = 0; r < rows; ++r) {
      fn(off, step, r * len, len);
      for (std::size_t d = idx.size();
           d-- > 0;) {  // odometer over the outer dims
        for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        if (++idx[d] < extents[d]) break;
        for (std::size_t k = 0; k < K; ++k)
          off[k] -= strides[k][d] * extents[d];
        idx[d] = 0;
      }
    }
  }
};

}  // namespace kiln::cpu
