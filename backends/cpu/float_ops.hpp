// The float semantics of the CPU's elementwise primitives, written once on xsimd
// batches (f32 and f64 lanes): what the generic kernels (elementwise.cpp), each
// SIMD level's table (simd_kernels.cpp, compiled per x86-64 level) and, through
// that table, the generated fused code (jit.cpp calls the level's kernels or
// vector functions) run. Those tables are derived from this file, so an op
// defined here cannot be left out of one (tests/test_cpu_fast_paths.cpp checks
// the derived tables against it at every level).
//
//   kFloatUnary<P>    P's float kernel is FloatUnary<P> (every float-taking
//                     unary row: the math rows through MathDef<P>::cpu)
//   kFloatBinary<P>   P's float kernel is FloatBinary<P> (batches);
//                     pow and atan2 are the C library's, element by element
//                     (exact special values; xsimd's atan2 is NaN at (0, 0)),
//                     so they have no batch kernel: kScalarBinary<P>
#pragma once

#include <xsimd/xsimd.hpp>

#include <type_traits>

#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/dsl/unary_math.hpp"

namespace kiln::cpu {

template <Prim P>
inline constexpr bool kFloatUnary =
    family(P) == PrimFamily::kUnary &&
    (has_trait(P, PrimTrait::kMath) || P == Prim::kNeg || P == Prim::kAbs || P == Prim::kExp ||
     P == Prim::kLog || P == Prim::kTanh || P == Prim::kSqrt || P == Prim::kRsqrt ||
     P == Prim::kSigmoid || P == Prim::kRelu);

template <Prim P>
struct FloatUnary {
  template <class B>
  B operator()(const B& x) const {
    using T = typename B::value_type;
    static_assert(std::is_floating_point_v<T>, "float lanes only");
    if constexpr (has_trait(P, PrimTrait::kMath)) {
      return MathDef<P>::cpu(x);
    } else if constexpr (P == Prim::kNeg) {  // the sign bit: xsimd 8's AVX-512 -x is 0 - x (+0 for +0)
      return x ^ B(T(-0.0));
    } else if constexpr (P == Prim::kAbs) {
      return xsimd::abs(x);
    } else if constexpr (P == Prim::kExp) {  // past xsimd's edges too (dsl/unary_math.hpp)
      return detail::math::exp_full(x);
    } else if constexpr (P == Prim::kLog) {
      return xsimd::log(x);
    } else if constexpr (P == Prim::kTanh) {
      return xsimd::tanh(x);
    } else if constexpr (P == Prim::kSqrt) {
      return xsimd::sqrt(x);
    } else if constexpr (P == Prim::kRsqrt) {
      return B(T(1)) / xsimd::sqrt(x);
    } else if constexpr (P == Prim::kSigmoid) {
      return detail::math::sigmoid_full(x);
    } else if constexpr (P == Prim::kRelu) {  // relu(NaN) is NaN
      return NanMaximum{}.simd_apply(x, B(T(0)));
    } else {
      static_assert(kUnhandled<P>, "kFloatUnary and FloatUnary disagree");
    }
  }
};

template <Prim P>
inline constexpr bool kScalarBinary = P == Prim::kPow || P == Prim::kAtan2;

template <Prim P>
inline constexpr bool kFloatBinary = P == Prim::kAdd || P == Prim::kSub || P == Prim::kMul ||
                                     P == Prim::kDiv || P == Prim::kMaximum || P == Prim::kMinimum;

template <Prim P>
struct FloatBinary {
  template <class B>
  B operator()(const B& x, const B& y) const {
    if constexpr (P == Prim::kAdd) {
      return x + y;
    } else if constexpr (P == Prim::kSub) {
      return x - y;
    } else if constexpr (P == Prim::kMul) {
      return x * y;
    } else if constexpr (P == Prim::kDiv) {
      return x / y;
    } else if constexpr (P == Prim::kMaximum) {
      return NanMaximum{}.simd_apply(x, y);
    } else if constexpr (P == Prim::kMinimum) {
      return NanMinimum{}.simd_apply(x, y);
    } else {
      static_assert(kUnhandled<P>, "kFloatBinary and FloatBinary disagree");
    }
  }
};

}  // namespace kiln::cpu
