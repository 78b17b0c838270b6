// NaN-propagating maximum/minimum functors (scalar and xsimd batch forms), shared
// by the elementwise kernels (maximum/minimum/relu) and the reductions (max/min).
#pragma once

#include <xsimd/xsimd.hpp>

namespace kiln::cpu {

// maximum/minimum that give NaN when either operand is NaN, like numpy.maximum.
// x != x is the NaN test that reads the same for scalars and batches.
struct NanMaximum {
  template <class T>
  T operator()(T x, T y) const {
    return x > y || x != x ? x : y;
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x > y) || (x != x), x, y);
  }
};
struct NanMinimum {
  template <class T>
  T operator()(T x, T y) const {
    return x < y || x != x ? x : y;
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x < y) || (x != x), x, y);
  }
};

}  // namespace kiln::cpu
