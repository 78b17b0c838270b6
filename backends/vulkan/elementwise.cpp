// Scalar semantics of the elementwise primitives in SPIR-V. These are the one
// definition the eager kernels use and the fused kernels will reuse.
#include <limits>

#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/backends/vulkan/lanes.hpp"
#include "kiln/dsl/unary_math.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

using spv::Builder;
using spv::Ty;
using spv::Val;

// ---- f64 transcendentals. GLSL.std.450 defines Exp/Log/Tanh/Pow for 16- and
// 32-bit floats only, so f64 gets its own range reduction and polynomials
// (accurate to a few ulp; pow to ~|y log x| ulp).

Val horner(Builder& b, const Val& x, std::initializer_list<double> coeffs) {
  // coeffs from the highest power down
  const Ty t = x.ty;
  auto it = coeffs.begin();
  Val acc = b.constant(t, *it++);
  for (; it != coeffs.end(); ++it) {
    acc = b.op("OpFAdd", t, {b.op("OpFMul", t, {acc, x}), b.constant(t, *it)});
  }
  return acc;
}

constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;

// x = n ln2 + r, |r| <= ln2 / 2; returns n and expm1(r).
std::pair<Val, Val> exp_reduce(Builder& b, const Val& x) {
  const Ty t = x.ty;
  Val n = b.glsl("Floor", t, {b.op("OpFAdd", t, {b.op("OpFMul", t, {x, b.constant(t, 1.4426950408889634)}),
                                                 b.constant(t, 0.5)})});
  // Fma keeps the two-step reduction exact: drivers may reassociate plain
  // adds (lavapipe's LLVM does), which would fold hi + lo back into ln2.
  Val nn = b.op("OpFNegate", t, {n});
  Val r = b.glsl("Fma", t, {nn, b.constant(t, kLn2Hi), x});
  r = b.glsl("Fma", t, {nn, b.constant(t, kLn2Lo), r});
  // expm1(r) = r * (1 + r/2 + r^2/6 + ... + r^13/14!)
  Val p = horner(b, r, {1.0 / 87178291200.0, 1.0 / 6227020800.0, 1.0 / 479001600.0,
                        1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                        1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0,
                        0.5, 1.0});
  return {n, b.op("OpFMul", t, {r, p})};
}

Val scale2(Builder& b, const Val& v, const Val& n) {  // v * 2^n in two steps
  Val ni = b.convert(n, Ty::kI32);
  Val h = b.op("OpShiftRightArithmetic", Ty::kI32, {ni, b.constant(Ty::kI32, 1)});
  Val rest = b.op("OpISub", Ty::kI32, {ni, h});
  return b.glsl("Ldexp", v.ty, {b.glsl("Ldexp", v.ty, {v, h}), rest});
}

Val exp64(Builder& b, const Val& x) {
  const Ty t = x.ty;
  auto [n, q] = exp_reduce(b, x);
  Val r = scale2(b, b.op("OpFAdd", t, {b.constant(t, 1), q}), n);
  const double inf = std::numeric_limits<double>::infinity();
  r = b.select(b.op("OpFOrdGreaterThan", Ty::kBool, {x, b.constant(t, 709.782712893384)}),
               b.constant(t, inf), r);
  r = b.select(b.op("OpFOrdLessThan", Ty::kBool, {x, b.constant(t, -745.2)}),
               b.constant(t, 0), r);
  return b.select(b.op("OpIsNan", Ty::kBool, {x}), x, r);
}

Val expm1_64(Builder& b, const Val& x) {  // for |x| <= 44
  const Ty t = x.ty;
  auto [n, q] = exp_reduce(b, x);
  Val big = b.op("OpFSub", t, {scale2(b, b.op("OpFAdd", t, {b.constant(t, 1), q}), n),
                               b.constant(t, 1)});
  return b.select(b.op("OpFOrdEqual", Ty::kBool, {n, b.constant(t, 0)}), q, big);
}

Val log64(Builder& b, const Val& x) {
  const Ty t = x.ty;
  spv::Var e = b.variable(Ty::kI32);
  Val m = b.frexp(x, e);
  Val ei = b.get(e);
  Val small = b.op("OpFOrdLessThan", Ty::kBool, {m, b.constant(t, 0.70710678118654752)});
  m = b.select(small, b.op("OpFMul", t, {m, b.constant(t, 2)}), m);
  ei = b.select(small, b.op("OpISub", Ty::kI32, {ei, b.constant(Ty::kI32, 1)}), ei);
  Val ef = b.convert(ei, t);
  Val f = b.op("OpFSub", t, {m, b.constant(t, 1)});
  Val s = b.op("OpFDiv", t, {f, b.op("OpFAdd", t, {f, b.constant(t, 2)})});
  Val z = b.op("OpFMul", t, {s, s});
  Val R = b.op("OpFMul", t, {z, horner(b, z, {1.0 / 25, 1.0 / 23, 1.0 / 21, 1.0 / 19,
                                              1.0 / 17, 1.0 / 15, 1.0 / 13, 1.0 / 11,
                                              1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3})});
  Val two_s = b.op("OpFAdd", t, {s, s});
  Val l1p = b.op("OpFAdd", t, {two_s, b.op("OpFMul", t, {two_s, R})});
  Val r = b.op("OpFAdd", t, {b.op("OpFMul", t, {ef, b.constant(t, kLn2Hi)}),
                             b.op("OpFAdd", t, {l1p, b.op("OpFMul", t, {ef, b.constant(t, kLn2Lo)})})});
  const double inf = std::numeric_limits<double>::infinity();
  r = b.select(b.op("OpFOrdEqual", Ty::kBool, {x, b.constant(t, inf)}), x, r);
  r = b.select(b.op("OpFOrdEqual", Ty::kBool, {x, b.constant(t, 0)}), b.constant(t, -inf), r);
  r = b.select(b.op("OpFOrdLessThan", Ty::kBool, {x, b.constant(t, 0)}),
               b.constant(t, std::nan("")), r);
  return b.select(b.op("OpIsNan", Ty::kBool, {x}), x, r);
}

Val tanh64(Builder& b, const Val& x) {
  const Ty t = x.ty;
  Val a = b.glsl("FMin", t, {b.glsl("FAbs", t, {x}), b.constant(t, 22)});
  Val e = expm1_64(b, b.op("OpFAdd", t, {a, a}));
  Val th = b.op("OpFDiv", t, {e, b.op("OpFAdd", t, {e, b.constant(t, 2)})});
  Val r = b.glsl("FSign", t, {x});
  r = b.op("OpFMul", t, {r, th});
  return b.select(b.op("OpIsNan", Ty::kBool, {x}), x, r);
}

// f32 (f16, bf16 compute in f32): kiln's own (dsl/f32_math.hpp).
Val exp_any(Builder& b, const Val& x) {
  if (x.ty == Ty::kF64) return exp64(b, x);
  return f32_lanes(b, x, [](const auto& k, const auto& v) { return detail::f32m::exp(k, v); });
}

Val nan_max(Builder& b, const Val& x, const Val& y, bool is_max) {
  Val pick = is_max ? b.op("OpFOrdGreaterThan", Ty::kBool, {x, y})
                    : b.op("OpFOrdLessThan", Ty::kBool, {x, y});
  Val r = b.select(pick, x, y);
  r = b.select(b.op("OpIsNan", Ty::kBool, {x}), x, r);
  return b.select(b.op("OpIsNan", Ty::kBool, {y}), y, r);
}

template <Prim P>
Val compare(Builder& b, const Val& x, const Val& y) {
  if (x.ty == Ty::kBool) {  // compare as 0/1
    return compare<P>(b, b.convert(x, Ty::kU32), b.convert(y, Ty::kU32));
  }
  const bool f = spv::is_float(x.ty), s = spv::is_signed(x.ty);
  const char* opcode = nullptr;
  if constexpr (P == Prim::kEq) {
    opcode = f ? "OpFOrdEqual" : "OpIEqual";
  } else if constexpr (P == Prim::kNe) {
    opcode = f ? "OpFUnordNotEqual" : "OpINotEqual";
  } else if constexpr (P == Prim::kLt) {
    opcode = f ? "OpFOrdLessThan" : s ? "OpSLessThan" : "OpULessThan";
  } else if constexpr (P == Prim::kLe) {
    opcode = f ? "OpFOrdLessThanEqual" : s ? "OpSLessThanEqual" : "OpULessThanEqual";
  } else if constexpr (P == Prim::kGt) {
    opcode = f ? "OpFOrdGreaterThan" : s ? "OpSGreaterThan" : "OpUGreaterThan";
  } else if constexpr (P == Prim::kGe) {
    opcode = f ? "OpFOrdGreaterThanEqual" : s ? "OpSGreaterThanEqual" : "OpUGreaterThanEqual";
  } else {
    static_assert(kUnhandled<P>, "a comparison without a SPIR-V opcode");
  }
  return b.op(opcode, Ty::kBool, {x, y});
}

// IEEE/numpy pow. f32 (f16, bf16): kiln's own. f64: exp64(y log64|x|), with
// sign for odd integer exponents, NaN for negative bases with fractional ones,
// pow(x, 0) == pow(1, y) == 1, pow(0, y < 0) == inf.
Val power(Builder& b, const Val& x, const Val& y) {
  const Ty t = x.ty;
  if (t != Ty::kF64) {  // kiln's own (dsl/f32_math.hpp), special values included
    return f32_lanes(b, x, y, [](const auto& k, const auto& u, const auto& v) {
      return detail::f32m::pow(k, u, v);
    });
  }
  Val zero = b.constant(t, 0), one = b.constant(t, 1);
  Val ax = b.glsl("FAbs", t, {x});
  Val p = exp64(b, b.op("OpFMul", t, {y, log64(b, ax)}));
  Val y_int = b.op("OpFOrdEqual", Ty::kBool, {b.glsl("Trunc", t, {y}), y});
  Val half = b.op("OpFMul", t, {y, b.constant(t, 0.5)});
  Val y_odd = b.op("OpLogicalAnd", Ty::kBool,
                   {y_int, b.op("OpFOrdNotEqual", Ty::kBool,
                                {b.glsl("Trunc", t, {half}), half})});
  Val neg = b.op("OpFOrdLessThan", Ty::kBool, {x, zero});
  Val signed_p = b.select(y_odd, b.op("OpFNegate", t, {p}), p);
  Val r = b.select(neg, b.select(y_int, signed_p, b.constant(t, std::nan(""))), p);
  Val x0 = b.op("OpFOrdEqual", Ty::kBool, {x, zero});
  Val yneg = b.op("OpFOrdLessThan", Ty::kBool, {y, zero});
  Val inf = b.constant(t, std::numeric_limits<double>::infinity());
  r = b.select(b.op("OpLogicalAnd", Ty::kBool, {x0, yneg}), inf, r);
  Val unit = b.op("OpLogicalOr", Ty::kBool,
                  {b.op("OpFOrdEqual", Ty::kBool, {y, zero}),
                   b.op("OpFOrdEqual", Ty::kBool, {x, one})});
  return b.select(unit, one, r);
}

Val shift(Builder& b, Prim p, const Val& x, const Val& amount) {
  Val ux = b.bitcast(x, Ty::kU32), ua = b.bitcast(amount, Ty::kU32);
  Val r = b.op(p == Prim::kShiftLeft ? "OpShiftLeftLogical" : "OpShiftRightLogical",
               Ty::kU32, {ux, ua});
  Val in_range = b.op("OpULessThan", Ty::kBool, {ua, b.u32(32)});
  return b.bitcast(b.select(in_range, r, b.u32(0)), x.ty);
}

Val int_divide(Builder& b, const Val& x, const Val& y) {
  const Ty t = x.ty;
  Val zero = b.constant(t, 0), one = b.constant(t, 1);
  Val y0 = b.op("OpIEqual", Ty::kBool, {y, zero});
  Val bad = y0;
  if (spv::is_signed(t)) {
    Val overflow = b.op("OpLogicalAnd", Ty::kBool,
                        {b.op("OpIEqual", Ty::kBool, {x, b.constant(t, -2147483648.0)}),
                         b.op("OpIEqual", Ty::kBool, {y, b.constant(t, -1)})});
    bad = b.op("OpLogicalOr", Ty::kBool, {y0, overflow});
  }
  Val safe = b.select(bad, one, y);
  Val q = b.op(spv::is_signed(t) ? "OpSDiv" : "OpUDiv", t, {x, safe});
  return b.select(y0, zero, q);
}

}  // namespace


namespace {

// One elementwise primitive P (every row of the unary, binary, where, astype
// and identity families: a row without a case fails the static_assert). A
// dtype the lowering does not take is a DTypeError naming the op.
template <Prim P>
Val emit_one(Builder& b, const Params& params, std::span<const Val> a, DType in, DType out) {
  const Val& x = a[0];
  const Ty t = x.ty;
  const bool f = spv::is_float(t);
  const auto no_lowering = [&] {
    return DTypeError(detail::str_cat("[", name(P), "] has no elementwise lowering on vulkan",
                                      " for dtype ", name(in)));
  };
  if constexpr (has_trait(P, PrimTrait::kMath) && family(P) == PrimFamily::kBinary) {
    if (!f) throw no_lowering();
    return MathDef<P>::vulkan(b, x, a[1]);
  } else if constexpr (has_trait(P, PrimTrait::kMath)) {
    if (!f) throw no_lowering();
    return MathDef<P>::vulkan(b, x);
  } else if constexpr (P == Prim::kNeg) {
    return f ? b.op("OpFNegate", t, {x}) : b.op("OpSNegate", t, {x});
  } else if constexpr (P == Prim::kAbs) {
    if (f) return b.glsl("FAbs", t, {x});
    if (spv::is_signed(t)) {  // wraps: abs(INT_MIN) == INT_MIN
      return b.select(b.op("OpSLessThan", Ty::kBool, {x, b.constant(t, 0)}),
                      b.op("OpSNegate", t, {x}), x);
    }
    return x;
  } else if constexpr (P == Prim::kExp) {
    return exp_any(b, x);
  } else if constexpr (P == Prim::kLog) {
    if (t == Ty::kF64) return log64(b, x);
    return f32_lanes(b, x, [](const auto& k, const auto& v) { return detail::f32m::log(k, v); });
  } else if constexpr (P == Prim::kTanh) {
    if (t == Ty::kF64) return tanh64(b, x);
    return f32_lanes(b, x, [](const auto& k, const auto& v) { return detail::f32m::tanh(k, v); });
  } else if constexpr (P == Prim::kSqrt) {
    return b.glsl("Sqrt", t, {x});
  } else if constexpr (P == Prim::kRsqrt) {
    return b.op("OpFDiv", t, {b.constant(t, 1), b.glsl("Sqrt", t, {x})});
  } else if constexpr (P == Prim::kSigmoid) {
    if (t != Ty::kF64) {
      return f32_lanes(b, x, [](const auto& k, const auto& v) { return detail::f32m::sigmoid(k, v); });
    }
    Val e = exp_any(b, b.op("OpFNegate", t, {x}));
    return b.op("OpFDiv", t, {b.constant(t, 1), b.op("OpFAdd", t, {b.constant(t, 1), e})});
  } else if constexpr (P == Prim::kRelu) {
    if (f) return nan_max(b, x, b.constant(t, 0), true);
    if (spv::is_signed(t)) return b.glsl("SMax", t, {x, b.constant(t, 0)});
    return x;
  } else if constexpr (P == Prim::kLogicalNot) {
    return b.op("OpLogicalNot", Ty::kBool, {x});
  } else if constexpr (P == Prim::kBitwiseNot) {
    return t == Ty::kBool ? b.op("OpLogicalNot", Ty::kBool, {x}) : b.op("OpNot", t, {x});
  } else if constexpr (P == Prim::kAdd) {
    return b.op(f ? "OpFAdd" : "OpIAdd", t, {x, a[1]});
  } else if constexpr (P == Prim::kSub) {
    return b.op(f ? "OpFSub" : "OpISub", t, {x, a[1]});
  } else if constexpr (P == Prim::kMul) {
    return b.op(f ? "OpFMul" : "OpIMul", t, {x, a[1]});
  } else if constexpr (P == Prim::kDiv) {
    return f ? b.op("OpFDiv", t, {x, a[1]}) : int_divide(b, x, a[1]);
  } else if constexpr (P == Prim::kPow) {
    return power(b, x, a[1]);
  } else if constexpr (P == Prim::kMaximum || P == Prim::kMinimum) {
    constexpr bool mx = P == Prim::kMaximum;
    if (f) return nan_max(b, x, a[1], mx);
    if (t == Ty::kBool) return b.op(mx ? "OpLogicalOr" : "OpLogicalAnd", t, {x, a[1]});
    const char* inst = spv::is_signed(t) ? (mx ? "SMax" : "SMin") : (mx ? "UMax" : "UMin");
    return b.glsl(inst, t, {x, a[1]});
  } else if constexpr (has_trait(P, PrimTrait::kComparison)) {
    return compare<P>(b, x, a[1]);
  } else if constexpr (P == Prim::kLogicalAnd) {
    return b.op("OpLogicalAnd", Ty::kBool, {x, a[1]});
  } else if constexpr (P == Prim::kLogicalOr) {
    return b.op("OpLogicalOr", Ty::kBool, {x, a[1]});
  } else if constexpr (P == Prim::kBitwiseAnd) {
    return t == Ty::kBool ? b.op("OpLogicalAnd", t, {x, a[1]}) : b.op("OpBitwiseAnd", t, {x, a[1]});
  } else if constexpr (P == Prim::kBitwiseOr) {
    return t == Ty::kBool ? b.op("OpLogicalOr", t, {x, a[1]}) : b.op("OpBitwiseOr", t, {x, a[1]});
  } else if constexpr (P == Prim::kBitwiseXor) {
    return t == Ty::kBool ? b.op("OpLogicalNotEqual", t, {x, a[1]})
                          : b.op("OpBitwiseXor", t, {x, a[1]});
  } else if constexpr (P == Prim::kShiftLeft || P == Prim::kShiftRightLogical) {
    return shift(b, P, x, a[1]);
  } else if constexpr (P == Prim::kWhere) {
    return b.select(a[0], a[1], a[2]);
  } else if constexpr (P == Prim::kAstype) {
    return b.convert(x, spv::compute_type(out));
  } else if constexpr (P == Prim::kBitcast) {
    return b.bitcast(x, spv::compute_type(params.as<DTypeParams>().dtype));
  } else if constexpr (P == Prim::kStopGradient) {
    return x;
  } else {
    static_assert(kUnhandled<P>, "an elementwise primitive without a SPIR-V lowering");
  }
}

}  // namespace

Val emit_elementwise(Builder& b, Prim p, const Params& params,
                     std::span<const Val> a, DType in, DType out) {
  struct Exact {  // Builder::set_exact_float for this op's instructions
    Builder& b;
    bool was;
    ~Exact() { b.set_exact_float(was); }
  } exact{b, b.set_exact_float(true)};
  return visit_prim(p, [&]<Prim P>(PrimC<P>) -> Val {
    constexpr PrimFamily fam = family(P);
    if constexpr (P == Prim::kFull) {
      return b.constant(spv::compute_type(out), params.as<FullParams>().value);
    } else if constexpr (fam == PrimFamily::kUnary || fam == PrimFamily::kBinary ||
                         fam == PrimFamily::kWhere || fam == PrimFamily::kAstype ||
                         fam == PrimFamily::kIdentity) {
      return emit_one<P>(b, params, a, in, out);
    } else {
      throw Error(detail::str_cat("[vulkan] ", name(P), " is not elementwise"));
    }
  });
}

}  // namespace kiln::vk
