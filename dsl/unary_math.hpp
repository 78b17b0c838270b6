// The floating-point unary math primitives, each defined once: its CPU kernel,
// its SPIR-V lowering and its vjp, side by side. Rows of dsl/primitives.inc
// with the kMath trait are defined here as MathDef<P>; the CPU backend
// (backends/cpu/elementwise.cpp), the Vulkan backend
// (backends/vulkan/elementwise.cpp) and autodiff (dsl/vjp.cpp) instantiate
// MathDef<P> for every row with the trait (their per-primitive dispatch,
// visit_family/visit_prim in dsl/primitive.hpp), so a kMath row without a
// MathDef does not compile, and none of those files changes when one is added.
//
//   cpu(x)        an xtensor expression over a flat float operand (found by
//                 argument-dependent lookup: xt::sin, ...; xsimd underneath)
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
// Precision: the CPU kernels are xsimd's (about 1 ulp); on Vulkan the GLSL.std.450
// instructions are the driver's (lavapipe: LLVM's libm; a GPU driver may be as
// loose as the Vulkan spec allows, 2^-11 absolute for sin/cos on [-pi, pi]).
// The GLSL transcendental instructions take 32-bit floats only, so on Vulkan
// these are f32 (f64 is a DTypeError naming the op); rounding, sign and the like
// take f64 too.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <type_traits>
#include <utility>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

template <Prim P>
struct MathDef;  // one specialisation per kMath row

namespace detail::math {

// Vulkan leaves NaN inputs (and arguments outside a function's domain) to the
// driver; kiln's ops give NaN there on every device, as IEEE and the CPU do.
template <class B, class V>
V nan_where(B& b, const V& bad, const V& r) {
  return b.select(bad, b.constant(r.ty, std::numeric_limits<double>::quiet_NaN()), r);
}
template <class B, class V>
V is_nan(B& b, const V& x) {
  using Ty = decltype(x.ty);
  return b.op("OpIsNan", Ty::kBool, {x});
}

// A GLSL.std.450 instruction that takes 16/32-bit floats only, NaN in -> NaN out.
template <class B, class V>
V glsl32(B& b, const char* inst, std::string_view op, const V& x) {
  using Ty = decltype(x.ty);
  if (x.ty == Ty::kF64) {
    throw DTypeError(str_cat("[", op, "] f64 is not supported on vulkan (GLSL.std.450 ", inst,
                             " takes 32-bit floats); use f32"));
  }
  return nan_where(b, is_nan(b, x), b.glsl(inst, x.ty, {x}));
}

// NaN where x < bound (log2, log1p below their domain).
template <class B, class V>
V nan_below(B& b, const V& x, double bound, const V& r) {
  using Ty = decltype(x.ty);
  return nan_where(b, b.op("OpFOrdLessThan", Ty::kBool, {x, b.constant(x.ty, bound)}), r);
}

template <class E>
using Elem = typename std::decay_t<E>::value_type;

}  // namespace detail::math

template <>
struct MathDef<Prim::kSin> {
  static auto cpu(const auto& x) { return sin(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Sin", "sin", x); }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * cos(x); }
  static double reference(double x) { return std::sin(x); }
  static constexpr double kLo = -4.0, kHi = 4.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 0.5f, -2.0f, 3.14159f, 10.0f};
};

template <>
struct MathDef<Prim::kCos> {
  static auto cpu(const auto& x) { return cos(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Cos", "cos", x); }
  static Array vjp(const Array& x, const Array&, const Array& g) { return -(g * sin(x)); }
  static double reference(double x) { return std::cos(x); }
  static constexpr double kLo = -4.0, kHi = 4.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -2.0f, 3.14159f, 10.0f};
};

template <>
struct MathDef<Prim::kTan> {
  static auto cpu(const auto& x) { return tan(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Tan", "tan", x); }
  static Array vjp(const Array&, const Array& y, const Array& g) { return g * (1.0 + y * y); }
  static double reference(double x) { return std::tan(x); }
  static constexpr double kLo = -1.2, kHi = 1.2;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -1.0f, 1.2f};
};

// Vulkan: through Atan, which drivers compute more accurately than Asin/Acos
// (lavapipe's Asin/Acos are off by ~2e-4): asin x = atan(x / sqrt((1-x)(1+x))),
// acos x = 2 atan(sqrt((1-x)/(1+x))), exact at +-1 (atan(+-inf)) and NaN past.
template <>
struct MathDef<Prim::kAsin> {
  static auto cpu(const auto& x) { return asin(x); }
  static auto vulkan(auto& b, const auto& x) {
    const auto t = x.ty;
    auto one = b.constant(t, 1);
    auto d = b.op("OpFMul", t, {b.op("OpFSub", t, {one, x}), b.op("OpFAdd", t, {one, x})});
    auto r = detail::math::glsl32(b, "Atan", "asin", b.op("OpFDiv", t, {x, b.glsl("Sqrt", t, {d})}));
    return detail::math::nan_below(b, d, 0, r);  // |x| > 1
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * rsqrt(1.0 - x * x); }
  static double reference(double x) { return std::asin(x); }
  static constexpr double kLo = -0.9, kHi = 0.9;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -0.99f, 1.0f, -1.0f, 2.0f};
};

template <>
struct MathDef<Prim::kAcos> {
  static auto cpu(const auto& x) { return acos(x); }
  static auto vulkan(auto& b, const auto& x) {
    const auto t = x.ty;
    auto one = b.constant(t, 1);
    auto r = b.op("OpFDiv", t, {b.op("OpFSub", t, {one, x}), b.op("OpFAdd", t, {one, x})});
    auto a = detail::math::glsl32(b, "Atan", "acos", b.glsl("Sqrt", t, {r}));
    auto d = b.op("OpFMul", t, {b.op("OpFSub", t, {one, x}), b.op("OpFAdd", t, {one, x})});
    return detail::math::nan_below(b, d, 0, b.op("OpFMul", t, {b.constant(t, 2), a}));
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
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Atan", "atan", x); }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g / (1.0 + x * x); }
  static double reference(double x) { return std::atan(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -7.0f, 1e6f};
};

template <>
struct MathDef<Prim::kSinh> {
  static auto cpu(const auto& x) { return sinh(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Sinh", "sinh", x); }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * cosh(x); }
  static double reference(double x) { return std::sinh(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -3.0f};
};

template <>
struct MathDef<Prim::kCosh> {
  static auto cpu(const auto& x) { return cosh(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Cosh", "cosh", x); }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g * sinh(x); }
  static double reference(double x) { return std::cosh(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, 0.5f, -3.0f};
};

template <>
struct MathDef<Prim::kLog2> {
  static auto cpu(const auto& x) { return log2(x); }
  static auto vulkan(auto& b, const auto& x) {
    return detail::math::nan_below(b, x, 0, detail::math::glsl32(b, "Log2", "log2", x));
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
  static auto cpu(const auto& x) { return exp2(x); }
  static auto vulkan(auto& b, const auto& x) { return detail::math::glsl32(b, "Exp2", "exp2", x); }
  static Array vjp(const Array&, const Array& y, const Array& g) {
    return g * y * std::numbers::ln2;
  }
  static double reference(double x) { return std::exp2(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {0.0f, 3.0f, -1.5f, 0.1f};
};

// log(1 + x) without cancellation for small x. Vulkan: Kahan's
// log(u) * x / (u - 1) with u = 1 + x (exact where u - 1 == x).
template <>
struct MathDef<Prim::kLog1p> {
  static auto cpu(const auto& x) {  // xsimd gives +0 for -0: keep zeros as they are
    using T = detail::math::Elem<decltype(x)>;
    return where(equal(x, T(0)), x, log1p(x));
  }
  static auto vulkan(auto& b, const auto& x) {
    using Ty = decltype(x.ty);
    const Ty t = x.ty;
    auto one = b.constant(t, 1);
    auto u = b.op("OpFAdd", t, {one, x});
    auto d = b.op("OpFSub", t, {u, one});
    auto l = detail::math::glsl32(b, "Log", "log1p", u);
    auto scaled = b.op("OpFMul", t, {l, b.op("OpFDiv", t, {x, d})});
    auto r = b.select(b.op("OpFOrdEqual", Ty::kBool, {d, b.constant(t, 0)}), x, scaled);
    // u = inf (x = inf): inf / inf would be NaN.
    r = b.select(b.op("OpIsInf", Ty::kBool, {u}), u, r);
    return detail::math::nan_below(b, x, -1, r);
  }
  static Array vjp(const Array& x, const Array&, const Array& g) { return g / (1.0 + x); }
  static double reference(double x) { return std::log1p(x); }
  static constexpr double kLo = -0.5, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 1e-9f, -3e-8f, 0.5f, -1.0f, 3.0f};
};

// exp(x) - 1 without cancellation for small x. Vulkan: Kahan's
// (u - 1) * x / log(u) with u = exp(x).
template <>
struct MathDef<Prim::kExpm1> {
  static auto cpu(const auto& x) {  // xsimd gives +0 for -0: keep zeros as they are
    using T = detail::math::Elem<decltype(x)>;
    return where(equal(x, T(0)), x, expm1(x));
  }
  static auto vulkan(auto& b, const auto& x) {
    using Ty = decltype(x.ty);
    const Ty t = x.ty;
    auto one = b.constant(t, 1);
    auto u = detail::math::glsl32(b, "Exp", "expm1", x);
    auto um1 = b.op("OpFSub", t, {u, one});
    auto l = b.glsl("Log", t, {u});
    auto scaled = b.op("OpFDiv", t, {b.op("OpFMul", t, {um1, x}), l});
    auto r = b.select(b.op("OpFOrdEqual", Ty::kBool, {u, one}), x, scaled);
    r = b.select(b.op("OpFOrdEqual", Ty::kBool, {um1, b.constant(t, -1)}), um1, r);
    return b.select(b.op("OpIsInf", Ty::kBool, {u}), u, r);
  }
  static Array vjp(const Array&, const Array& y, const Array& g) { return g * (y + 1.0); }
  static double reference(double x) { return std::expm1(x); }
  static constexpr double kLo = -2.0, kHi = 2.0;
  static constexpr float kSpecial[] = {0.0f, -0.0f, 1e-9f, -3e-8f, 0.5f, -4.0f, 2.0f};
};

// Rounding: piecewise constant, zero gradient (as JAX).
template <>
struct MathDef<Prim::kFloor> {
  static auto cpu(const auto& x) { return floor(x); }
  static auto vulkan(auto& b, const auto& x) { return b.glsl("Floor", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::floor(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-1.5f, -0.5f, 0.0f, 2.7f, -3.0f};
};

template <>
struct MathDef<Prim::kCeil> {
  static auto cpu(const auto& x) { return ceil(x); }
  static auto vulkan(auto& b, const auto& x) { return b.glsl("Ceil", x.ty, {x}); }
  static Array vjp(const Array&, const Array&, const Array& g) { return zeros_like(g); }
  static double reference(double x) { return std::ceil(x); }
  static constexpr double kLo = -3.0, kHi = 3.0;
  static constexpr float kSpecial[] = {-1.5f, -0.5f, 0.0f, 2.2f, 3.0f};
};

template <>
struct MathDef<Prim::kTrunc> {
  static auto cpu(const auto& x) { return trunc(x); }
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
  static auto cpu(const auto& x) { return nearbyint(x); }
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
    return where(x > T(0), T(1), where(x < T(0), T(-1), x));
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

// ---- binary (KILN_MATH2 rows): cpu(a, b) on scalars (the CPU backend applies
// it elementwise), vulkan(b, a, b), vjp(a, b, y, g)
// giving both cotangents (autodiff sums them over broadcast axes), reference(a,
// b), kLo/kHi for a and kLoB/kHiB for b, kSpecial as (a, b) pairs.

// atan2(a, b): the angle of the point (b, a) (numpy.arctan2). Vulkan: GLSL
// Atan2 leaves a == b == 0 undefined and drivers differ at infinities, so
// those are selected explicitly, with C's signs: a = +-0 gives +-0 for b >= +0
// and +-pi for b <= -0; a = +-inf gives +-pi/2, or +-pi/4 / +-3pi/4 when b is
// infinite too; b = +inf gives +-0 and b = -inf +-pi for finite a.
template <>
struct MathDef<Prim::kAtan2> {
  // Scalar (the C library's, right at zeros and infinities; xsimd's batch
  // atan2 gives NaN at (0, 0) and at infinities).
  template <class T>
  static T cpu(T a, T b) {
    return std::atan2(a, b);
  }
  static auto vulkan(auto& bld, const auto& y, const auto& x) {
    using Ty = decltype(y.ty);
    const Ty t = y.ty;
    if (t == Ty::kF64) {
      throw DTypeError("[atan2] f64 is not supported on vulkan (GLSL.std.450 Atan2 takes "
                       "32-bit floats); use f32");
    }
    const auto negative = [&](const auto& v) {  // the sign bit: -0 too
      return bld.op("OpSLessThan", Ty::kBool, {bld.bitcast(v, Ty::kI32), bld.constant(Ty::kI32, 0)});
    };
    const auto with_sign_of_y = [&](double v) {
      return bld.select(negative(y), bld.constant(t, -v), bld.constant(t, v));
    };
    const auto is = [&](const char* op, const auto& v) { return bld.op(op, Ty::kBool, {v}); };
    const auto any = [&](const auto& p, const auto& q) { return bld.op("OpLogicalOr", Ty::kBool, {p, q}); };
    constexpr double pi = std::numbers::pi;
    auto r = bld.glsl("Atan2", t, {y, x});
    const auto xneg = negative(x);
    // b infinite (a finite): +-0 or +-pi.
    r = bld.select(is("OpIsInf", x),
                   bld.select(xneg, with_sign_of_y(pi), bld.select(negative(y), bld.constant(t, -0.0),
                                                                   bld.constant(t, 0.0))),
                   r);
    // a infinite: +-pi/2, or +-pi/4 / +-3pi/4 with b infinite.
    const auto corner = bld.select(xneg, with_sign_of_y(0.75 * pi), with_sign_of_y(0.25 * pi));
    r = bld.select(is("OpIsInf", y), bld.select(is("OpIsInf", x), corner, with_sign_of_y(0.5 * pi)), r);
    // a zero: a itself (+-0) or +-pi.
    const auto y0 = bld.op("OpFOrdEqual", Ty::kBool, {y, bld.constant(t, 0)});
    r = bld.select(y0, bld.select(xneg, with_sign_of_y(pi), y), r);
    return detail::math::nan_where(bld, any(is("OpIsNan", y), is("OpIsNan", x)), r);
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
