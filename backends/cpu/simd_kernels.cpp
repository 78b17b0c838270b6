// SIMD kernels of the common elementwise ops (simd.hpp), compiled once per x86-64
// level with that level's -march and -DKILN_ISA=<namespace> (backends/meson.build).
// Arithmetic and math run on xsimd batches of the level's widest registers;
// comparisons, where and conversions, whose operands and results differ in lane
// width, are plain loops the compiler vectorizes for the level. Semantics are
// those documented in elementwise.cpp (NaN-propagating maximum/minimum and relu,
// wrapping i32 arithmetic, saturating float -> integer conversion).
//
// Everything here has internal linkage or lives in the level's namespace, so the
// levels' objects share no symbol whose code depends on the level.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kiln/backends/cpu/float_ops.hpp"
#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/unary_math.hpp"

#ifndef KILN_ISA
#error "simd_kernels.cpp is compiled with -DKILN_ISA=<namespace> (backends/meson.build)"
#endif

namespace kiln::cpu::KILN_ISA {
namespace {

template <class T>
using Batch = xsimd::batch<T>;  // this level's widest registers

// ---- batch maps: full batches in place, the last partial one padded ----

// out[i] = f(x[i], y[i]) with SA/SB: the operand is one broadcast element.
template <class T, bool SA, bool SB, class F>
inline void map2(F f, const T* a, const T* b, T* out, std::size_t n) {
  constexpr std::size_t kW = Batch<T>::size;
  const Batch<T> ba(a[0]), bb(b[0]);
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) {
    const Batch<T> x = SA ? ba : Batch<T>::load_unaligned(a + i);
    const Batch<T> y = SB ? bb : Batch<T>::load_unaligned(b + i);
    f(x, y).store_unaligned(out + i);
  }
  if (i == n) return;
  alignas(64) T ta[kW] = {}, tb[kW] = {}, to[kW];
  const std::size_t rest = n - i;
  if (!SA) std::memcpy(ta, a + i, rest * sizeof(T));
  if (!SB) std::memcpy(tb, b + i, rest * sizeof(T));
  const Batch<T> x = SA ? ba : Batch<T>::load_aligned(ta);
  const Batch<T> y = SB ? bb : Batch<T>::load_aligned(tb);
  f(x, y).store_aligned(to);
  std::memcpy(out + i, to, rest * sizeof(T));
}

template <class T, class F>
void binary(const FlatOperand* in, void* out, std::size_t n) {
  const auto* a = static_cast<const T*>(in[0].data);
  const auto* b = static_cast<const T*>(in[1].data);
  auto* o = static_cast<T*>(out);
  const F f;
  if (in[0].scalar && in[1].scalar) return map2<T, true, true>(f, a, b, o, n);
  if (in[0].scalar) return map2<T, true, false>(f, a, b, o, n);
  if (in[1].scalar) return map2<T, false, true>(f, a, b, o, n);
  map2<T, false, false>(f, a, b, o, n);
}

// A unary op is a binary map whose second operand is ignored.
template <class T, class F>
void unary(const FlatOperand* in, void* out, std::size_t n) {
  const FlatOperand both[2] = {in[0], in[0]};
  struct First {
    Batch<T> operator()(const Batch<T>& x, const Batch<T>&) const { return F{}(x); }
  };
  binary<T, First>(both, out, n);
}

// ---- the ops, as batch functors ----

struct Add {
  template <class B> B operator()(const B& x, const B& y) const { return x + y; }
};
struct Sub {
  template <class B> B operator()(const B& x, const B& y) const { return x - y; }
};
struct Mul {
  template <class B> B operator()(const B& x, const B& y) const { return x * y; }
};
struct And {
  template <class B> B operator()(const B& x, const B& y) const { return x & y; }
};
struct Or {
  template <class B> B operator()(const B& x, const B& y) const { return x | y; }
};
struct Xor {
  template <class B> B operator()(const B& x, const B& y) const { return x ^ y; }
};
// ---- one vector through the level's vector ABI ----
// x86-64-v3 and v4 (ymm/zmm registers): the float kernels of the ops that are
// not exactly rounded run each batch through one out-of-line function, whose
// address the fused-body code generator calls with the same register (jit.hpp):
// one copy of the machine code for both paths. noipa: no inlining, no clone, no
// change of calling convention.
#if defined(__AVX2__)
constexpr bool kVectorAbi = true;
using VecReg = Batch<float>::register_type;
template <class F>
[[gnu::noipa]] VecReg vector_unary(VecReg x) {
  return F{}(Batch<float>(x));
}
template <class F>
struct ViaVector {
  Batch<float> operator()(const Batch<float>& x) const { return vector_unary<F>(x); }
};
#else
constexpr bool kVectorAbi = false;
template <class F>
using ViaVector = F;
#endif

// The float kernel of the transcendental F: through its vector function where
// the level has one.
template <class T, class F>
FlatKernel transcendental() {
  if constexpr (kVectorAbi && std::is_same_v<T, float>) return unary<T, ViaVector<F>>;
  return unary<T, F>;
}

// ---- plain loops: comparisons, where, conversions ----

template <class T, class F, bool SA, bool SB>
[[gnu::always_inline]] inline void compare_loop(const T* __restrict a, const T* __restrict b,
                                                std::uint8_t* __restrict out, std::size_t n) {
  const F f;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint8_t>(f(a[SA ? 0 : i], b[SB ? 0 : i]));
  }
}

template <class T, class F>
void compare(const FlatOperand* in, void* out, std::size_t n) {
  const auto* a = static_cast<const T*>(in[0].data);
  const auto* b = static_cast<const T*>(in[1].data);
  auto* o = static_cast<std::uint8_t*>(out);
  if (in[0].scalar && in[1].scalar) return compare_loop<T, F, true, true>(a, b, o, n);
  if (in[0].scalar) return compare_loop<T, F, true, false>(a, b, o, n);
  if (in[1].scalar) return compare_loop<T, F, false, true>(a, b, o, n);
  compare_loop<T, F, false, false>(a, b, o, n);
}

// Both values are loaded before the select, so the loop has no control flow.
template <class S, bool C, bool A, bool B>
void where_loop(const std::uint8_t* __restrict c, const S* __restrict a, const S* __restrict b,
                S* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const S x = a[A ? i : 0];
    const S y = b[B ? i : 0];
    out[i] = c[C ? i : 0] != 0 ? x : y;
  }
}

template <class S>
void where(const FlatOperand* in, void* out, std::size_t n) {
  const auto* c = static_cast<const std::uint8_t*>(in[0].data);
  const auto* a = static_cast<const S*>(in[1].data);
  const auto* b = static_cast<const S*>(in[2].data);
  auto* o = static_cast<S*>(out);
  switch ((in[0].scalar ? 0 : 4) | (in[1].scalar ? 0 : 2) | (in[2].scalar ? 0 : 1)) {
    case 0: return where_loop<S, false, false, false>(c, a, b, o, n);
    case 1: return where_loop<S, false, false, true>(c, a, b, o, n);
    case 2: return where_loop<S, false, true, false>(c, a, b, o, n);
    case 3: return where_loop<S, false, true, true>(c, a, b, o, n);
    case 4: return where_loop<S, true, false, false>(c, a, b, o, n);
    case 5: return where_loop<S, true, false, true>(c, a, b, o, n);
    case 6: return where_loop<S, true, true, false>(c, a, b, o, n);
    default: return where_loop<S, true, true, true>(c, a, b, o, n);
  }
}

// From -> To as astype defines it: to bool, nonzero (and NaN) is true; float ->
// integer truncates and saturates, NaN -> 0; the rest are C++ conversions.
template <class From, class To>
To convert(From x) {
  if constexpr (std::is_same_v<To, std::uint8_t>) {  // bool
    return static_cast<To>(x != From(0));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    constexpr auto lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr auto hi = static_cast<From>(std::numeric_limits<To>::max());
    if (x != x) return To(0);
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

template <class From, class To>
void astype(const FlatOperand* in, void* out, std::size_t n) {
  const auto* __restrict x = static_cast<const From*>(in[0].data);
  auto* __restrict o = static_cast<To*>(out);
  if (in[0].scalar) {
    std::fill_n(o, n, convert<From, To>(x[0]));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) o[i] = convert<From, To>(x[i]);
}

// ---- the table ----

// Derived from backends/cpu/float_ops.hpp: every op defined there has its
// kernel here (the transcendentals through the level's vector function).
template <class T>
FlatKernel float_kernel(Prim p) {
  return visit_prim(p, []<Prim P>(PrimC<P>) -> FlatKernel {
    if constexpr (kFloatUnary<P> && has_trait(P, PrimTrait::kTranscendental)) {
      return transcendental<T, FloatUnary<P>>();
    } else if constexpr (kFloatUnary<P>) {
      return unary<T, FloatUnary<P>>;
    } else if constexpr (kFloatBinary<P>) {
      return binary<T, FloatBinary<P>>;
    } else {
      return nullptr;
    }
  });
}

// i32 and u32 arithmetic wraps (two's complement lanes), like the generic kernels.
template <class T>
FlatKernel int_kernel(Prim p) {
  switch (p) {
    case Prim::kAdd: return binary<T, Add>;
    case Prim::kSub: return binary<T, Sub>;
    case Prim::kMul: return binary<T, Mul>;
    case Prim::kBitwiseAnd: return binary<T, And>;
    case Prim::kBitwiseOr: return binary<T, Or>;
    case Prim::kBitwiseXor: return binary<T, Xor>;
    default: return nullptr;
  }
}

template <class T>
FlatKernel compare_kernel(Prim p) {
  switch (p) {
    case Prim::kEq: return compare<T, std::equal_to<>>;
    case Prim::kNe: return compare<T, std::not_equal_to<>>;
    case Prim::kLt: return compare<T, std::less<>>;
    case Prim::kLe: return compare<T, std::less_equal<>>;
    case Prim::kGt: return compare<T, std::greater<>>;
    case Prim::kGe: return compare<T, std::greater_equal<>>;
    default: return nullptr;
  }
}

// Host element type of a dtype these kernels take (bool as its byte), passed to f;
// nullptr for the others.
template <class F>
FlatKernel with_type(DType d, F f) {
  switch (d) {
    case DType::kBool: return f(std::uint8_t{});
    case DType::kI32: return f(std::int32_t{});
    case DType::kU32: return f(std::uint32_t{});
    case DType::kF32: return f(float{});
    case DType::kF64: return f(double{});
    default: return nullptr;
  }
}

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

}  // namespace

FlatKernel kernel(Prim p, DType in, DType out) {
  if (p == Prim::kAstype) {
    return with_type(in, [&](auto from) {
      return with_type(out, [&](auto to) -> FlatKernel {
        return astype<decltype(from), decltype(to)>;
      });
    });
  }
  if (p == Prim::kWhere) {
    return with_type(out, [](auto t) -> FlatKernel { return where<decltype(t)>; });
  }
  return with_type(in, [&](auto t) -> FlatKernel {
    using T = decltype(t);
    if (has_trait(p, PrimTrait::kComparison)) return compare_kernel<T>(p);
    if constexpr (kIsFloat<T>) {
      return float_kernel<T>(p);
    } else if constexpr (std::is_same_v<T, std::uint8_t>) {  // bool bytes
      switch (p) {
        case Prim::kLogicalAnd: return binary<T, And>;
        case Prim::kLogicalOr: return binary<T, Or>;
        default: return nullptr;
      }
    } else {
      // i32 on u32 lanes: the same bits, and no signed overflow (xsimd's generic
      // multiply is a scalar loop on the lane type).
      return int_kernel<std::make_unsigned_t<T>>(p);
    }
  });
}

const void* vector_kernel(Prim p, DType in, DType out) {
  if (in != DType::kF32 || out != DType::kF32) return nullptr;
#if defined(__AVX2__)
  return visit_prim(p, []<Prim P>(PrimC<P>) -> const void* {
    if constexpr (kFloatUnary<P> && has_trait(P, PrimTrait::kTranscendental)) {
      return reinterpret_cast<const void*>(&vector_unary<FloatUnary<P>>);
    } else {
      return nullptr;
    }
  });
#else
  (void)p;
  return nullptr;
#endif
}

}  // namespace kiln::cpu::KILN_ISA
