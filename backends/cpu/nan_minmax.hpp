// NaN-propagating maximum/minimum functors (scalar and xsimd batch forms), shared
// by the elementwise kernels (maximum/minimum/relu) and the reductions (max/min).
#pragma once

#include <xsimd/xsimd.hpp>

#include <type_traits>

namespace kiln::cpu {

// The NaN lanes of a batch (none for integers). Not x != x: xsimd 8's AVX-512
// != is the ordered comparison, false for NaN.
template <class B>
auto is_nan(const B& x) {
  if constexpr (std::is_floating_point_v<typename B::value_type>) {
    return xsimd::isnan(x);
  } else {
    return x != x;
  }
}

// maximum/minimum that give NaN when either operand is NaN, like numpy.maximum.
struct NanMaximum {
  template <class T>
  T operator()(T x, T y) const {
    return x > y || x != x ? x : y;
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x > y) || is_nan(x), x, y);
  }
};
struct NanMinimum {
  template <class T>
  T operator()(T x, T y) const {
    return x < y || x != x ? x : y;
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x < y) || is_nan(x), x, y);
  }
};

}  // namespace kiln::cpu
