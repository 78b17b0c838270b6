// The floating-point unary math primitives, each defined once: its CPU kernel,
// its SPIR-V lowering and its vjp, side by side. Rows of dsl/primitives.inc
// with the kMath trait are defined here as MathDef<P>; the CPU backend
// (backends/cpu/elementwise.cpp), the Vulkan backend
// (backends/vulkan/elementwise.cpp) and autodiff (dsl/vjp.cpp) instantiate
// MathDef<P> for every row with the trait (their per-primitive dispatch,
// visit_family/visit_prim in dsl/primitive.hpp), so a kMath row without a
// MathDef does not compile, and none of those files changes when one is added.
//
//   cpu(x)        x: an xsimd batch of f32 or f64 (functions found by
//                 argument-dependent lookup: xsimd::sin, select, ...)
//   vulkan(b, x)  SPIR-V through spv::Builder (a template here so that dsl does
//                 not depend on the backend; instantiated in the Vulkan backend)
//   vjp(x, y, g)  the input's cotangent, in the DSL (so gradients trace)
//   and what the tests take from it (no test keeps a list of these ops):
//   reference(x)  the value in double (the C library), which
//                 tests/test_ops_elementwise.cpp compares with on kSpecial
//                 and NaN, on every device
//   kLo, kHi      the range the backend-ops harness samples (smooth there:
//                 the vjp is checked against finite differences)
//   kSpecial      inputs whose results are checked exactly in kind (zeros'
//                 signs, infinities, NaN, domain edges); the harness also
//                 compares them between backends
//
// Precision (docs/DTYPES.md): within 4 ulp of the correctly rounded f32 value
// on every finite input, special values exact, on every device
// (tests/test_math_sweep.cpp). The CPU kernels are xsimd's; on Vulkan the f32
// lowering is kiln's own math (dsl/f32_math.hpp) through own_f32, never the
// driver's GLSL.std.450 transcendentals. Those without an f64 lowering are f32
// on Vulkan (f64 is a DTypeError naming the op); rounding, sign and the like
// take f64 too.
#pragma once

#include <cmath>
#include <array>
#include <cstddef>
#include <limits>
#include <numbers>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/dsl/f32_math.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

template <Prim P>
struct MathDef;  // one specialisation per kMath row

namespace detail::math {

template <class V>
void refuse_f64_on_vulkan(const V& x, std::string_view op, std::string_view why) {
  using Ty = decltype(x.ty);
  if (x.ty == Ty::kF64) {
    throw DTypeError(str_cat("[", op, "] f64 is not supported on vulkan (", why, "); use f32"));
  }
}

// kiln's own f32 math (dsl/f32_math.hpp) in SPIR-V, on f32 lanes (f16 and
// bf16 compute in f32): `fn(k, x)` with the backend's lane type, which
// f32_lanes (backends/vulkan/lanes.hpp, found by argument-dependent lookup on
// the builder) provides. f64 is a DTypeError naming the op.
template <class B, class V, class Fn>
V own_f32(B& b, const V& x, std::string_view op, Fn fn) {
  refuse_f64_on_vulkan(x, op, "kiln's own transcendentals are f32's");
  return f32_lanes(b, x, fn);
}

template <class E>
using Elem = typename std::decay_t<E>::value_type;

// exp, expm1, exp2 and sigmoid on xsimd batches over f32's whole range, the
// one definition the CPU's generic kernels, SIMD kernels and generated code
// call. xsimd 8 gives inf from exp(88.3763) (its maxlog) and exp2(127), where
// the results are finite up to 88.7228 and 128, and 0 below exp(-87.34) and
// exp2(-126), where they are subnormal down to -103.97 and -149. Past +-87,
// exp(x) is exp(x / 2)^2 (x / 2 exact; within 3 ulp), and expm1 is exp (1 is
// below half an ulp there); past +-126, exp2(x) is 2 exp2(x - 1) or
// 2^-64 exp2(x + 64) (each step exact). f64: xsimd's own.
// (The edges are taken only when a lane of the batch is past them: the common
// batch costs one comparison.)
template <class B>
B exp_full(const B& x) {
  using T = Elem<B>;
  if constexpr (std::is_same_v<T, float>) {
    const auto half = abs(x) > B(87.0f);
    if (!any(half)) return exp(x);
    const B e = exp(select(half, x * B(0.5f), x));
    return select(half, e * e, e);
  } else {
    return exp(x);
  }
}
template <class B>
B expm1_full(const B& x) {
  using T = Elem<B>;
  if constexpr (std::is_same_v<T, float>) {
    return select(x > B(88.0f), exp_full(x), expm1(x));
  } else {
    return expm1(x);
  }
}
template <class B>
B exp2_full(const B& x) {
  using T = Elem<B>;
  if constexpr (std::is_same_v<T, float>) {
    const auto big = x > B(126.0f);
    const auto small = x < B(-126.0f);
    if (!any(big | small)) return exp2(x);
    const B e = exp2(select(big, x - B(1.0f), select(small, x + B(64.0f), x)));
    return select(big, e * B(2.0f), select(small, e * B(0x1p-64f), e));
  } else {
    return exp2(x);
  }
}
// 1 / (1 + e^-x); where e^-x overflows (x < -88.7) the result is subnormal,
// so batches with a lane below -80 take e^x / (1 + e^x) there. NaN stays NaN.
template <class B>
B sigmoid_full(const B& x) {
  using T = Elem<B>;
  const B one(T(1));
  const B r = one / (one + exp(-x));  // e^-x past the edges: 0 or inf, r 1 or 0
  const auto low = x < B(T(-80));
  if (!any(low)) return r;
  const B e = exp_full(x);
  return select(low, e / (one + e), r);
}

}  // namespace detail::math

template <>
struct MathDef<Prim::kSin> {
  static auto cpu(const auto& x) { return sin(x); }
  // kiln's own f32 sin (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::sin(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "sin", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * cos(x); }
  static double reference(double x) { return std::sin(x); }
  static constexpr double kLo = -4.0, kHi = 4.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 0.5f, -2.0f, 3.14159f, 10.0f};
};

template <>
struct MathDef<Prim::kCos> {
  static auto cpu(const auto& x) { return cos(x); }
  // kiln's own f32 cos (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::cos(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "cos", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return -(g * sin(x)); }
  static double reference(double x) { return std::cos(x); }
  static constexpr double kLo = -4.0, kHi = 4.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -2.0f, 3.14159f, 10.0f};
};

template <>
struct MathDef<Prim::kTan> {
  static auto cpu(const auto& x) { return tan(x); }
  // kiln's own f32 tan (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::tan(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "tan", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array&, const Array& y, const Array& g) { return g * (1.0 + y * y); }
  static double reference(double x) { return std::tan(x); }
  static constexpr double kLo = -1.2, kHi = 1.2;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -1.0f, 1.2f};
};

// asin, acos: NaN past +-1 and for NaN, +-pi/2 and 0 / pi exactly at the ends.
template <>
struct MathDef<Prim::kAsin> {
  static auto cpu(const auto& x) { return asin(x); }
  // kiln's own f32 asin (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::asin(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "asin", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array& x, const Array&, const Array& g) { return g * rsqrt(1.0 - x * x); }
  static double reference(double x) { return std::asin(x); }
  static constexpr double kLo = -0.9, kHi = 0.9;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -0.99f, 1.0f, -1.0f, 2.0f};
};

template <>
struct MathDef<Prim::kAcos> {
  static auto cpu(const auto& x) { return acos(x); }
  // kiln's own f32 acos (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::acos(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "acos", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array& x, const Array&, const Array& g) {
    return -(g * rsqrt(1.0 - x * x));
  }
  static double reference(double x) { return std::acos(x); }
  static constexpr double kLo = -0.9, kHi = 0.9;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -0.99f, 1.0f, -1.0f, 2.0f};
};

template <>
struct MathDef<Prim::kAtan> {
  static auto cpu(const auto& x) { return atan(x); }
  // kiln's own f32 atan (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::atan(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "atan", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g / (1.0 + x * x); }
  static double reference(double x) { return std::atan(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -7.0f, 1e6f};
};

template <>
struct MathDef<Prim::kSinh> {
  static auto cpu(const auto& x) { return sinh(x); }
  // kiln's own f32 sinh (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::sinh(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "sinh", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * cosh(x); }
  static double reference(double x) { return std::sinh(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -3.0f};
};

template <>
struct MathDef<Prim::kCosh> {
  static auto cpu(const auto& x) { return cosh(x); }
  // kiln's own f32 cosh (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::cosh(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "cosh", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * sinh(x); }
  static double reference(double x) { return std::cosh(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -3.0f};
};

template <>
struct MathDef<Prim::kLog2> {
  static auto cpu(const auto& x) { return log2(x); }
  // kiln's own f32 log2 (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::log2(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "log2", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array& x, const Array&, const Array& g) {
    return g / (x * std::numbers::ln2);
  }
  static double reference(double x) { return std::log2(x); }
  static constexpr double kLo = 0.2, kHi = 5.0;
  static constexpr float kSpecial[] = {1.0f, 8.0f, 0.3f, 0.0f, -1.0f};
};

template <>
struct MathDef<Prim::kExp2> {
  static auto cpu(const auto& x) { return detail::math::exp2_full(x); }
  // kiln's own f32 exp2 (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::exp2(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "exp2", [](const auto& k, const auto& v) { return own(k, v); });
  }
  static Array vjp(const Array&, const Array& y, const Array& g) {
    return g * y * std::numbers::ln2;
  }
  static double reference(double x) { return std::exp2(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {0.0f, 3.0f, -1.5f, 0.1f};
};

// log(1 + x) without cancellation for small x; -0 stays -0.
template <>
struct MathDef<Prim::kLog1p> {
  static auto cpu(const auto& x) {  // xsimd gives +0 for -0: keep zeros as they are
    using T = detail::math::Elem<decltype(x)>;
    return select(x == T(0), x, log1p(x));
  }
  // kiln's own f32 log1p (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::log1p(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "log1p", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array& x, const Array&, const Array& g) { return g / (1.0 + x); }
  static double reference(double x) { return std::log1p(x); }
  static constexpr double kLo = -0.5, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 1e-9f, -3e-8f, 0.5f, -1.0f, 3.0f};
};

// exp(x) - 1 without cancellation for small x; -0 stays -0.
template <>
struct MathDef<Prim::kExpm1> {
  static auto cpu(const auto& x) {  // xsimd gives +0 for -0: keep zeros as they are
    using T = detail::math::Elem<decltype(x)>;
    return select(x == T(0), x, detail::math::expm1_full(x));
  }
  // kiln's own f32 expm1 (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::expm1(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "expm1", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array&, const Array& y, const Array& g) { return g * (y + 1.0); }
  static double reference(double x) { return std::expm1(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 1e-9f, -3e-8f, 0.5f, -4.0f, 2.0f};
};

// Rounding: piecewise constant, zero gradient (as JAX).
template <>
struct MathDef<Prim::kFloor> {
  static auto cpu(const auto& x) { return copysign(floor(x), x); }  // -0 kept at every SIMD level
  static auto vulkan(auto& b, const auto& x) { return b.glsl("Floor", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::floor(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-1.5f, -0.5f, 0.0f, 2.7f, -3.0f};
};

template <>
struct MathDef<Prim::kCeil> {
  static auto cpu(const auto& x) { return copysign(ceil(x), x); }  // -0 kept at every SIMD level
  static auto vulkan(auto& b, const auto& x) { return b.glsl("Ceil", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::ceil(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-1.5f, -0.5f, 0.0f, 2.2f, 3.0f};
};

template <>
struct MathDef<Prim::kTrunc> {
  static auto cpu(const auto& x) { return copysign(trunc(x), x); }  // -0 kept at every SIMD level
  static auto vulkan(auto& b, const auto& x) { return b.glsl("Trunc", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::trunc(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-1.5f, -0.5f, 0.0f, 2.7f};
};

// Half to even, as numpy.round and jnp.round (nearbyint in the default
// rounding mode; GLSL RoundEven).
template <>
struct MathDef<Prim::kRound> {
  static auto cpu(const auto& x) { return copysign(nearbyint(x), x); }  // -0 kept at every level
  static auto vulkan(auto& b, const auto& x) { return b.glsl("RoundEven", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::nearbyint(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 2.6f, -0.4f};
};

// -1, 1, or x itself for zeros (keeping -0.0) and NaN, as jnp.sign.
template <>
struct MathDef<Prim::kSign> {
  static auto cpu(const auto& x) {
    using T = detail::math::Elem<decltype(x)>;
    using V = std::decay_t<decltype(x)>;
    return select(x > T(0), V(T(1)), select(x < T(0), V(T(-1)), x));
  }
  static auto vulkan(auto& b, const auto& x) {
    using Ty = decltype(x.ty);
    const Ty t = x.ty;
    auto zero = b.constant(t, 0);
    auto neg = b.select(b.op("OpFOrdLessThan", Ty::kBool, {x, zero}), b.constant(t, -1), x);
    return b.select(b.op("OpFOrdGreaterThan", Ty::kBool, {x, zero}), b.constant(t, 1), neg);
  }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
  static constexpr double kLo = 0.1, kHi = 2.0;
  static constexpr float kSpecial[] = {-3.0f, 0.0f, -0.0f, 2.0f};
};

namespace detail::math {

// A product as the compiler must leave it: rounded, never fused with the add
// that follows into an fma. GCC contracts a * b + c by default where the SIMD
// level has fmas (x86-64-v3/v4), which gave erfinv other bits there than the
// unfused DSL ops, jax.lax.erf_inv's steps (random::normal's) and Vulkan's
// NoContraction lowering; the empty asm hides the product from the contraction.
template <class B>
B rounded(const B& x) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (requires { x.data; }) {
    auto r = x.data;
    __asm__("" : "+v"(r));
    return B(r);
  } else {
    return x;
  }
#else
  return x;
#endif
}

// Horner's rule over c[0] (the highest degree) .. c[K], p = c[i] + p * w, on
// xsimd batches, each product rounded apart.
template <std::size_t K, class C, class W>
auto horner_upto(const C& c, const W& w) {
  if constexpr (K == 1) {
    return c[1] + rounded(W(c[0] * w));
  } else {
    return c[K] + rounded(W(horner_upto<K - 1>(c, w) * w));
  }
}
template <class C, class W>
auto horner(const C& c, const W& w) {
  return horner_upto<std::tuple_size_v<C> - 1>(c, w);
}

// The same in SPIR-V, each product and sum kept apart (no fma), as the CPU
// (rounded above) and the unfused DSL ops compute it.
template <class B, class V, class C>
V horner(B& b, const C& c, const V& w) {
  const auto t = w.ty;
  V p = b.constant(t, c[0]);
  for (std::size_t i = 1; i < c.size(); ++i) {
    V m = b.op("OpFMul", t, {p, w});
    b.no_contraction(m);
    p = b.op("OpFAdd", t, {b.constant(t, c[i]), m});
    b.no_contraction(p);
  }
  return p;
}


}  // namespace detail::math

// The error function. CPU: xsimd's erf (f32 ~2 ulp; f64 within ~7e-15
// relative). Vulkan (f32 only): kiln's own (dsl/f32_math.hpp).
template <>
struct MathDef<Prim::kErf> {
  static auto cpu(const auto& x) { return erf(x); }
  // kiln's own f32 erf (dsl/f32_math.hpp), on any lane type: SPIR-V below,
  // plain floats in tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& x) { return detail::f32m::erf(k, x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::own_f32(b, x, "erf", [](const auto& k, const auto& v) { return own(k, v); });
  }

  static Array vjp(const Array& x, const Array&, const Array& g) {
    return g * (exp(-(x * x)) * (2.0 * std::numbers::inv_sqrtpi));
  }
  static double reference(double x) { return std::erf(x); }
  static constexpr double kLo = -2.5, kHi = 2.5;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 0.5f, -1.5f, 3.0f, -4.5f, 10.0f, 1e-8f, 1e-30f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity()};
};

// The inverse error function: erfinv(+-1) = +-inf, NaN past +-1 and for NaN.
// f32 is XLA's ErfInv32 (Giles' single-precision polynomial in
// w = -log1p(-x^2)) step for step, so its bits are jax.lax.erf_inv's and the
// composite's that random::normal used before (tests/test_random.cpp): ~1e-7
// relative below |x| = 0.99, up to ~3e-6 nearer +-1 where x^2 rounds away low
// bits of 1 - x^2. f64 (CPU) is Giles' double-precision polynomials (XLA's
// ErfInv64) in w = -log((1 - x)(1 + x)), which keeps those bits: within 1e-15
// relative of mpmath. Vulkan: f32 only (as its log1p).
template <>
struct MathDef<Prim::kErfinv> {
  static constexpr std::array<float, 9> kSmall{2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                               -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                               -0.00417768164f,  0.246640727f,    1.50140941f};
  static constexpr std::array<float, 9> kLarge{-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                               -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                               0.00943887047f,   1.00167406f,     2.83297682f};
  static constexpr std::array<double, 23> kBelow6_25{
      -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
      1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
      6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
      2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
      4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
      0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
      0.24015818242558961693,     1.6536545626831027356};
  static constexpr std::array<double, 19> kBelow16{
      2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
      1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
      2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
      6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
      0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
      -0.0037512085075692412107, 0.005370914553590063617,   1.0052589676941592334,
      3.0838856104922207635};
  static constexpr std::array<double, 17> kAbove16{
      -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
      -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
      2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
      -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
      7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
      1.0103004648645343977,      4.8499064014085844221};

  static auto cpu(const auto& x) {
    using T = detail::math::Elem<decltype(x)>;
    using V = std::decay_t<decltype(x)>;
    constexpr T kInf = std::numeric_limits<T>::infinity();
    V r;
    if constexpr (std::is_same_v<T, float>) {
      const V w = -log1p(-(x * x));
      const V small = w - 2.5f;
      const V large = sqrt(w) - 3.0f;
      r = select(w < 5.0f, detail::math::horner(kSmall, small), detail::math::horner(kLarge, large));
    } else {
      const V w = -log((T(1) - x) * (T(1) + x));
      const V near = w - 3.125;
      const V s = sqrt(w);
      const V mid = s - 3.25;
      const V far = s - 5.0;
      r = select(w < 6.25, detail::math::horner(kBelow6_25, near),
                 select(w < 16.0, detail::math::horner(kBelow16, mid),
                        detail::math::horner(kAbove16, far)));
    }
    // The polynomials are indeterminate at +-1; the limits are +-inf.
    return select(abs(x) == T(1), x * kInf, r * x);
  }
  static auto vulkan(auto& b, const auto& x) {
    using Ty = decltype(x.ty);
    detail::math::refuse_f64_on_vulkan(x, "erfinv", "kiln's own log1p is f32's");
    const Ty t = x.ty;
    auto x2 = b.op("OpFMul", t, {x, x});
    b.no_contraction(x2);
    auto w = b.op("OpFNegate", t, {MathDef<Prim::kLog1p>::vulkan(b, b.op("OpFNegate", t, {x2}))});
    auto small = b.op("OpFOrdLessThan", Ty::kBool, {w, b.constant(t, 5)});
    auto ws = b.op("OpFSub", t, {w, b.constant(t, 2.5)});
    b.no_contraction(ws);
    auto wl = b.op("OpFSub", t, {b.glsl("Sqrt", t, {w}), b.constant(t, 3)});
    b.no_contraction(wl);
    auto p =
        b.select(small, detail::math::horner(b, kSmall, ws), detail::math::horner(b, kLarge, wl));
    auto px = b.op("OpFMul", t, {p, x});
    b.no_contraction(px);
    auto one = b.op("OpFOrdEqual", Ty::kBool, {b.glsl("FAbs", t, {x}), b.constant(t, 1)});
    auto inf = b.op("OpFMul", t, {x, b.constant(t, std::numeric_limits<double>::infinity())});
    return b.select(one, inf, px);
  }
  static Array vjp(const Array&, const Array& y, const Array& g) {
    return g * (exp(y * y) * (0.5 / std::numbers::inv_sqrtpi));
  }
  // Newton on std::erf from the closed-form start (tests only).
  static double reference(double x) {
    if (std::isnan(x) || std::abs(x) > 1) return std::numeric_limits<double>::quiet_NaN();
    if (std::abs(x) == 1) return std::copysign(std::numeric_limits<double>::infinity(), x);
    if (x == 0) return x;
    double y = std::copysign(std::sqrt(-std::log((1 - x) * (1 + x))), x) * 0.8;
    for (int i = 0; i < 100; ++i) {
      const double step = (std::erf(y) - x) / (2 * std::numbers::inv_sqrtpi * std::exp(-y * y));
      y -= step;
      if (std::abs(step) <= 1e-17 * std::abs(y)) break;
    }
    return y;
  }
  static constexpr double kLo = -0.9, kHi = 0.9;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 0.5f, -0.25f, 0.9f, -0.98f, 1.0f,
                                       -1.0f, 1.5f,  -1.0001f, 1e-30f};
};

// ---- binary (KILN_MATH2 rows): cpu(a, b) on scalars (the CPU backend applies
// it elementwise), vulkan(b, a, b), vjp(a, b, y, g)
// giving both cotangents (autodiff sums them over broadcast axes), reference(a,
// b), kLo/kHi for a and kLoB/kHiB for b, kSpecial as (a, b) pairs.

// atan2(a, b): the angle of the point (b, a) (numpy.arctan2), with C's values
// at zeros and infinities (dsl/f32_math.hpp's atan2 selects them on Vulkan).
template <>
struct MathDef<Prim::kAtan2> {
  // Scalar (the C library's, right at zeros and infinities; xsimd's batch
  // atan2 gives NaN at (0, 0) and at infinities).
  template <class T>
  static T cpu(T a, T b) {
    return std::atan2(a, b);
  }
  // kiln's own f32 atan2, on any lane type: SPIR-V below, plain floats in
  // tests/test_math_sweep.cpp.
  static auto own(const auto& k, const auto& a, const auto& b) { return detail::f32m::atan2(k, a, b); }
  static auto vulkan(auto& bld, const auto& y, const auto& x) {
    detail::math::refuse_f64_on_vulkan(y, "atan2", "kiln's own transcendentals are f32's");
    return f32_lanes(bld, y, x, [](const auto& k, const auto& u, const auto& v) { return own(k, u, v); });
  }
  static std::pair<Array, Array> vjp(const Array& a, const Array& b, const Array&, const Array& g) {
    const Array r2 = a * a + b * b;
    return {g * b / r2, -(g * a) / r2};
  }
  static double reference(double a, double b) { return std::atan2(a, b); }
  // b > 0: away from the branch cut along b < 0, a = 0 (finite differences).
  static constexpr double kLo = -2.0, kHi = 2.0, kLoB = 0.3, kHiB = 2.0;
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  static constexpr float kSpecial[][2] = {
      {0.0f, 0.0f},  {-0.0f, 0.0f}, {0.0f, -0.0f}, {-0.0f, -0.0f}, {0.0f, -2.0f},
      {-0.0f, -2.0f}, {0.0f, 3.0f}, {-0.0f, 3.0f}, {3.0f, 0.0f},   {-3.0f, 0.0f},
      {1.0f, 1.0f},  {1.0f, -1.0f}, {-1.0f, -1.0f}, {kInf, kInf},  {kInf, -kInf},
      {-kInf, 1.0f}, {1.0f, kInf},  {1.0f, -kInf}, {-1.0f, -kInf}, {-kInf, -kInf}};
};

}  // namespace kiln
