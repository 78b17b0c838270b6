// NaN-propagating maximum/minimum functors (scalar and xsimd batch forms), shared
// by the elementwise kernels (maximum/minimum/relu) and the reductions (max/min).
#pragma once

#include <xsimd/xsimd.hpp>

#include <bit>
#include <cstdint>
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

// c ? a : b without a branch: a ternary on floats compiles to a conditional
// jump, which a reduction over real data (max of a pooling window) mispredicts
// half the time. The select is done on the bits.
template <class T>
T select(bool c, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const U mask = U{0} - static_cast<U>(c);
    return std::bit_cast<T>((std::bit_cast<U>(a) & mask) | (std::bit_cast<U>(b) & ~mask));
  } else {
    return c ? a : b;
  }
}

// maximum/minimum that give NaN when either operand is NaN, like numpy.maximum.
struct NanMaximum {
  template <class T>
  T operator()(T x, T y) const {
    return select((x > y) | (x != x), x, y);  // NOLINT: x != x is the NaN test
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x > y) || is_nan(x), x, y);
  }
};
struct NanMinimum {
  template <class T>
  T operator()(T x, T y) const {
    return select((x < y) | (x != x), x, y);  // NOLINT: x != x is the NaN test
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return xsimd::select((x < y) || is_nan(x), x, y);
  }
};

}  // namespace kiln::cpu
