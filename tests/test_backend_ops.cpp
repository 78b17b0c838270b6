// The backend-ops harness (in the spirit of ggml's test-backend-ops): for every
// primitive of the table (dsl/primitives.inc, enumerated through all_prims(),
// never a hand-kept list) it builds cases over dtypes and shapes (size 0, size
// 1, broadcasting, lengths that are not multiples of the vector width) and
// checks
//   - that the DSL call of the case binds that primitive (trace),
//   - the device under test (KILN_DEVICE) against the CPU backend (reference),
//   - filter_jit with fusion off against eager, and fused against unfused, on a
//     first call and on a cache hit with other values,
//   - the vjp of differentiable primitives against central finite differences
//     (in f64 where the op takes f64),
//   - vmap of the op (its primitive's batching rule) against the op per example.
// cases_for() switches over Prim with no default: a primitive added to the
// table without cases here is a compile error (-Wswitch, warnings are errors).
// The float math rows (KILN_MATH) get theirs from MathDef<P>, expanded from
// the table, so adding one needs no edit here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <kiln/kiln.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kiln/dsl/trace.hpp"
#include "kiln/dsl/unary_math.hpp"
#include "kiln/dsl/vmap.hpp"
#include "kiln/runtime/strings.hpp"

using namespace kiln;

namespace {

using Inputs = std::span<const Array>;
// The DSL call under test; `device` is where creation ops create.
using Op = std::function<Array(Inputs, Device)>;

struct Case {
  std::string label;
  std::vector<Array> inputs;  // on the CPU
  Op op;
  bool grad = true;  // check the vjp (differentiable primitives, float inputs)
};

// ---- inputs (deterministic, on the CPU) ----

std::uint32_t g_seed = 1;

Array uniform(const Shape& shape, double lo, double hi, DType dtype = f32) {
  std::mt19937 g(g_seed++);
  std::uniform_real_distribution<double> u(lo, hi);
  const auto n = static_cast<std::size_t>(numel(shape));
  if (dtype == f64) {
    std::vector<double> v(n);
    for (auto& x : v) x = u(g);
    return Array::from_data<double>(v, shape);
  }
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(u(g));
  return Array::from_data<float>(v, shape);
}

// Values of magnitude in [lo, hi] with random signs: away from a kink at 0.
Array signed_away(const Shape& shape, double lo, double hi) {
  std::mt19937 g(g_seed++);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(numel(shape)));
  for (auto& x : v) x = static_cast<float>((g() & 1) ? u(g) : -u(g));
  return Array::from_data<float>(v, shape);
}

Array integers(const Shape& shape, std::int64_t lo, std::int64_t hi, DType dtype = i32) {
  std::mt19937 g(g_seed++);
  std::uniform_int_distribution<std::int64_t> u(lo, hi);
  const auto n = static_cast<std::size_t>(numel(shape));
  if (dtype == u32) {
    std::vector<std::uint32_t> v(n);
    for (auto& x : v) x = static_cast<std::uint32_t>(u(g));
    return Array::from_data<std::uint32_t>(v, shape);
  }
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(u(g));
  return Array::from_data<std::int32_t>(v, shape);
}

Array booleans(const Shape& shape) { return integers(shape, 0, 1) > integers(shape, 0, 0); }

Array of(DType dtype, const Shape& shape, double lo = -2, double hi = 2) {
  if (dtype == f32 || dtype == f64) return uniform(shape, lo, hi, dtype);
  if (dtype == DType::kBool) return booleans(shape);
  return integers(shape, static_cast<std::int64_t>(dtype == u32 ? 0 : lo) * 7,
                  static_cast<std::int64_t>(hi) * 7, dtype);
}

std::string shape_text(const Shape& s) { return "(" + detail::join(s, ",") + ")"; }

// Same-shape lengths (scalar, empty, one, not a multiple of 4/8/16, 2-D).
const std::vector<Shape> kShapes = {{}, {0}, {1}, {17}, {4, 33}, {1027}};
// Broadcasting pairs.
const std::vector<std::pair<Shape, Shape>> kPairs = {
    {{17}, {17}}, {{4, 1}, {1, 5}}, {{}, {6}}, {{3, 5}, {5}}, {{0}, {0}}, {{2, 1, 3}, {4, 1}}};

using Unary = Array (*)(const Array&);
using Binary = Array (*)(const Array&, const Array&);

std::vector<Case> unary(Unary f, std::vector<DType> dtypes,
                        const std::function<Array(DType, const Shape&)>& make) {
  std::vector<Case> out;
  for (DType d : dtypes) {
    for (const Shape& s : kShapes) {
      out.push_back({std::string(name(d)) + shape_text(s), {make(d, s)},
                     [f](Inputs x, Device) { return f(x[0]); }});
    }
  }
  return out;
}
std::vector<Case> unary(Unary f, std::vector<DType> dtypes, double lo = -2, double hi = 2) {
  return unary(f, std::move(dtypes), [=](DType d, const Shape& s) { return of(d, s, lo, hi); });
}

std::vector<Case> binary(Binary f, std::vector<DType> dtypes,
                         const std::function<Array(DType, const Shape&)>& make_a,
                         const std::function<Array(DType, const Shape&)>& make_b) {
  std::vector<Case> out;
  for (DType d : dtypes) {
    for (const auto& [sa, sb] : kPairs) {
      out.push_back({std::string(name(d)) + shape_text(sa) + shape_text(sb),
                     {make_a(d, sa), make_b(d, sb)},
                     [f](Inputs x, Device) { return f(x[0], x[1]); }});
    }
  }
  return out;
}
std::vector<Case> binary(Binary f, std::vector<DType> dtypes, double lo = -2, double hi = 2) {
  auto make = [=](DType d, const Shape& s) { return of(d, s, lo, hi); };
  return binary(f, std::move(dtypes), make, make);
}

Case one(std::string label, std::vector<Array> inputs, Op op, bool grad = true) {
  return {std::move(label), std::move(inputs), std::move(op), grad};
}

// arange has no device argument: it creates on the default device.
template <class F>
Array on_default(Device d, F make) {
  const Device saved = default_device();
  set_default_device(d);
  Array out;
  try {
    out = make();
  } catch (...) {
    set_default_device(saved);
    throw;
  }
  set_default_device(saved);
  return out;
}

// Nonzero divisors (integer division by 0 is defined, but say so separately).
Array divisor(DType d, const Shape& s) {
  if (d == f32) return signed_away(s, 0.5, 2.0);
  Array m = integers(s, 1, 9, d);
  return d == i32 ? where(booleans(s), m, neg(m)) : m;
}

// A float math op's cases come from its MathDef (dsl/unary_math.hpp): random
// samples in [kLo, kHi] (vjp checked), and its special values (no vjp).
template <Prim P>
std::vector<Case> math_cases(Array (*f)(const Array&)) {
  std::vector<Case> out = unary(f, {f32}, MathDef<P>::kLo, MathDef<P>::kHi);
  const std::vector<float> special(std::begin(MathDef<P>::kSpecial), std::end(MathDef<P>::kSpecial));
  const auto n = static_cast<std::int64_t>(special.size());
  out.push_back(one("special", {Array::from_data<float>(special, {n})},
                    [f](Inputs x, Device) { return f(x[0]); }, false));
  return out;
}

template <Prim P>
std::vector<Case> math2_cases(Array (*f)(const Array&, const Array&)) {
  using D = MathDef<P>;
  std::vector<Case> out =
      binary(f, {f32}, [](DType d, const Shape& s) { return of(d, s, D::kLo, D::kHi); },
             [](DType d, const Shape& s) { return of(d, s, D::kLoB, D::kHiB); });
  std::vector<float> a, b;
  for (const auto& pair : D::kSpecial) {
    a.push_back(pair[0]);
    b.push_back(pair[1]);
  }
  const auto n = static_cast<std::int64_t>(a.size());
  out.push_back(one("special", {Array::from_data<float>(a, {n}), Array::from_data<float>(b, {n})},
                    [f](Inputs x, Device) { return f(x[0], x[1]); }, false));
  return out;
}

std::vector<Case> cases_for(Prim p) {
  const std::vector<DType> kFloat = {f32};
  const std::vector<DType> kNumeric = {f32, i32};
  const std::vector<DType> kInts = {i32, u32};
  const auto away = [](DType d, const Shape& s) {
    return d == f32 ? signed_away(s, 0.1, 2.0) : of(d, s);
  };
  const auto positive = [](DType d, const Shape& s) { return of(d, s, 0.3, 3.0); };
  switch (p) {
    case Prim::kNeg: return unary(neg, kNumeric);
    case Prim::kAbs: return unary(abs, kNumeric, away);
    case Prim::kExp: return unary(exp, kFloat);
    case Prim::kLog: return unary(log, kFloat, 0.2, 3.0);
    case Prim::kTanh: return unary(tanh, kFloat);
    case Prim::kSqrt: return unary(sqrt, kFloat, 0.2, 3.0);
    case Prim::kRsqrt: return unary(rsqrt, kFloat, 0.2, 3.0);
    case Prim::kSigmoid: return unary(sigmoid, kFloat, -4.0, 4.0);
    case Prim::kRelu: return unary(relu, kNumeric, away);
    case Prim::kLogicalNot: return unary(logical_not, {DType::kBool});
    case Prim::kBitwiseNot: return unary(bitwise_not, {i32, u32, DType::kBool});
#define KILN_PRIM(id, name, family, params, traits)
#define KILN_MATH(id, name, traits) \
  case Prim::id:                    \
    return math_cases<Prim::id>(&kiln::name);
#define KILN_MATH2(id, name, traits) \
  case Prim::id:                     \
    return math2_cases<Prim::id>(&kiln::name);
#include "kiln/dsl/primitives.inc"
#undef KILN_MATH2
#undef KILN_MATH
#undef KILN_PRIM
    case Prim::kAdd: return binary(add, kNumeric);
    case Prim::kSub: return binary(subtract, kNumeric);
    case Prim::kMul: return binary(multiply, kNumeric);
    case Prim::kDiv: {
      std::vector<Case> out = binary(divide, kNumeric, [](DType d, const Shape& s) { return of(d, s); },
                                     divisor);
      out.push_back(one("i32 by zero", {integers({5}, -9, 9), zeros({5}, i32, Device::cpu())},
                        [](Inputs x, Device) { return divide(x[0], x[1]); }));
      return out;
    }
    case Prim::kPow: return binary(power, kFloat, positive, [](DType d, const Shape& s) { return of(d, s, -2, 2); });
    case Prim::kMaximum: return binary(maximum, kNumeric);
    case Prim::kMinimum: return binary(minimum, kNumeric);
    case Prim::kEq: return binary(equal, kNumeric, -1, 1);
    case Prim::kNe: return binary(not_equal, kNumeric, -1, 1);
    case Prim::kLt: return binary(less, kNumeric, -1, 1);
    case Prim::kLe: return binary(less_equal, kNumeric, -1, 1);
    case Prim::kGt: return binary(greater, kNumeric, -1, 1);
    case Prim::kGe: return binary(greater_equal, kNumeric, -1, 1);
    case Prim::kLogicalAnd: return binary(logical_and, {DType::kBool});
    case Prim::kLogicalOr: return binary(logical_or, {DType::kBool});
    case Prim::kBitwiseAnd: return binary(bitwise_and, {i32, u32, DType::kBool}, -1000, 1000);
    case Prim::kBitwiseOr: return binary(bitwise_or, {i32, u32, DType::kBool}, -1000, 1000);
    case Prim::kBitwiseXor: return binary(bitwise_xor, {i32, u32, DType::kBool}, -1000, 1000);
    case Prim::kShiftLeft:
    case Prim::kShiftRightLogical: {
      const Binary f = p == Prim::kShiftLeft ? static_cast<Binary>(shift_left)
                                             : static_cast<Binary>(shift_right_logical);
      // Amounts in [-2, 40]: outside [0, 32) the result is 0.
      return binary(f, kInts, [](DType d, const Shape& s) { return of(d, s, -1000, 1000); },
                    [](DType d, const Shape& s) {
                      return d == u32 ? integers(s, 0, 40, u32) : integers(s, -2, 40);
                    });
    }
    case Prim::kWhere: {
      std::vector<Case> out;
      for (const auto& [sa, sb] : kPairs) {
        out.push_back(one("f32" + shape_text(sa) + shape_text(sb),
                          {booleans(sa), uniform(sb, -2, 2), uniform(sa, -2, 2)},
                          [](Inputs x, Device) { return where(x[0], x[1], x[2]); }));
      }
      out.push_back(one("i32", {booleans({7}), integers({7}, -5, 5), integers({1}, -5, 5)},
                        [](Inputs x, Device) { return where(x[0], x[1], x[2]); }));
      return out;
    }
    case Prim::kAstype: {
      std::vector<Case> out;
      const std::pair<DType, DType> pairs[] = {{f32, f64}, {f32, i32}, {i32, f32}, {f32, DType::kBool},
                                               {DType::kBool, f32}, {i32, u32}, {u32, f32}};
      for (auto [from, to] : pairs) {
        for (const Shape& s : {Shape{}, Shape{0}, Shape{17}}) {
          out.push_back(one(std::string(name(from)) + "->" + std::string(name(to)) + shape_text(s),
                            {from == f32 ? uniform(s, -300, 300) : of(from, s, -300, 300)},
                            [to](Inputs x, Device) { return astype(x[0], to); }, to == f64));
        }
      }
      return out;
    }
    case Prim::kBitcast: {
      std::vector<Case> out;
      for (auto [from, to] : {std::pair{f32, i32}, std::pair{i32, f32}, std::pair{u32, i32}}) {
        for (const Shape& s : {Shape{}, Shape{0}, Shape{17}}) {
          out.push_back(one(std::string(name(from)) + "->" + std::string(name(to)) + shape_text(s),
                            {from == f32 ? uniform(s, -3, 3) : integers(s, 0, 1 << 22, from)},
                            [to](Inputs x, Device) { return bitcast(x[0], to); }, false));
        }
      }
      return out;
    }
    case Prim::kSum:
    case Prim::kMax:
    case Prim::kMin: {
      using Reduce = Array (*)(const Array&, AxisArg, bool);
      const Reduce f = p == Prim::kSum ? static_cast<Reduce>(sum)
                       : p == Prim::kMax ? static_cast<Reduce>(max) : static_cast<Reduce>(min);
      std::vector<Case> out;
      for (DType d : kNumeric) {
        for (const Shape& s : {Shape{17}, Shape{4, 33}, Shape{2, 3, 5}, Shape{1027}}) {
          out.push_back(one(std::string(name(d)) + shape_text(s) + " all", {of(d, s)},
                            [f](Inputs x, Device) { return f(x[0], AxisArg(), false); }));
          out.push_back(one(std::string(name(d)) + shape_text(s) + " last keepdims", {of(d, s)},
                            [f](Inputs x, Device) { return f(x[0], x[0].ndim() - 1, true); }));
          if (s.size() > 1) {
            out.push_back(one(std::string(name(d)) + shape_text(s) + " first", {of(d, s)},
                              [f](Inputs x, Device) { return f(x[0], 0, false); }));
          }
        }
      }
      if (p == Prim::kSum) {
        out.push_back(one("f32 (0,3) over 0", {zeros({0, 3}, f32, Device::cpu())},
                          [f](Inputs x, Device) { return f(x[0], 0, false); }));
      }
      return out;
    }
    case Prim::kProd: {
      // Factors near 1 (no overflow over 1027 of them); zeros exercise the
      // exact gradient at zeros (one zero in a row, two zeros in a row).
      const auto near1 = [](const Shape& s) { return uniform(s, 0.97, 1.03); };
      const Array one_zero = Array::from_data<float>(std::vector<float>{0.5f, 0.0f, 2.0f, 1.5f, -1.0f, 3.0f}, {2, 3});
      const Array two_zeros = Array::from_data<float>(std::vector<float>{0.0f, 2.0f, 0.0f, 1.5f, -1.0f, 0.0f}, {2, 3});
      return {one("f32 (17) all", {near1({17})}, [](Inputs x, Device) { return prod(x[0]); }),
              one("f32 (4,33) last keepdims", {near1({4, 33})},
                  [](Inputs x, Device) { return prod(x[0], -1, true); }),
              one("f32 (2,3,5) first", {near1({2, 3, 5})}, [](Inputs x, Device) { return prod(x[0], 0); }),
              one("f64 (1027) all", {uniform({1027}, 0.99, 1.01, f64)},
                  [](Inputs x, Device) { return prod(x[0]); }),
              one("f32 one zero per row", {one_zero}, [](Inputs x, Device) { return prod(x[0], 1); }),
              one("f32 two zeros, column", {two_zeros}, [](Inputs x, Device) { return prod(x[0], 0); }),
              one("f32 zeros in (2,3) all", {two_zeros}, [](Inputs x, Device) { return prod(x[0]); }),
              one("i32 (4,5) wraps", {integers({4, 5}, -9, 9)},
                  [](Inputs x, Device) { return prod(x[0], 1); }),
              one("u32 (33)", {integers({33}, 0, 3, u32)}, [](Inputs x, Device) { return prod(x[0]); }),
              one("f32 (0,3) over 0: ones", {zeros({0, 3}, f32, Device::cpu())},
                  [](Inputs x, Device) { return prod(x[0], 0); })};
    }
    case Prim::kCumsum:
    case Prim::kCumprod: {
      using Scan = Array (*)(const Array&, std::int64_t, bool);
      const Scan f = p == Prim::kCumsum ? static_cast<Scan>(cumsum) : static_cast<Scan>(cumprod);
      const double lo = p == Prim::kCumsum ? -2 : 0.9, hi = p == Prim::kCumsum ? 2 : 1.1;
      std::vector<Case> out;
      for (const Shape& s : {Shape{17}, Shape{4, 33}, Shape{2, 3, 5}, Shape{1}, Shape{0, 3}}) {
        for (std::int64_t axis = 0; axis < static_cast<std::int64_t>(s.size()); ++axis) {
          for (bool rev : {false, true}) {
            out.push_back(one(detail::str_cat("f32", shape_text(s), " axis ", axis, rev ? " reverse" : ""),
                              {uniform(s, lo, hi)},
                              [f, axis, rev](Inputs x, Device) { return f(x[0], axis, rev); }));
          }
        }
      }
      out.push_back(one("f64 (1027)", {uniform({1027}, lo, hi, f64)},
                        [f](Inputs x, Device) { return f(x[0], 0, false); }));
      out.push_back(one("i32 (4,9) axis 1 wraps", {integers({4, 9}, -40, 40)},
                        [f](Inputs x, Device) { return f(x[0], 1, false); }));
      out.push_back(one("u32 (9,4) axis 0 reverse", {integers({9, 4}, 0, 9, u32)},
                        [f](Inputs x, Device) { return f(x[0], 0, true); }));
      if (p == Prim::kCumprod) {  // the exact gradient at zeros
        out.push_back(one("f32 zeros", {Array::from_data<float>(std::vector<float>{0.5f, 0.0f, 2.0f, 0.0f, 1.5f, -1.0f,
                                                                 3.0f, 0.0f, 1.25f, 2.0f}, {2, 5})},
                          [f](Inputs x, Device) { return f(x[0], 1, false); }));
        out.push_back(one("f32 zeros reverse", {Array::from_data<float>(std::vector<float>{0.5f, 0.0f, 2.0f, 0.0f, 1.5f,
                                                                         -1.0f, 3.0f, 0.0f, 1.25f, 2.0f},
                                                                        {2, 5})},
                          [f](Inputs x, Device) { return f(x[0], 1, true); }));
      }
      return out;
    }
    case Prim::kArgsort: {
      // Ties (small integers), NaN, infinities and -0.0 / 0.0; lengths that
      // pad to the next power of two; every axis; both directions.
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      const Array special = Array::from_data<float>(
          std::vector<float>{1, nan, -0.0f, 0.0f, -inf, 2, nan, inf, 1, -0.0f, -3}, {11});
      std::vector<Case> out;
      for (bool desc : {false, true}) {
        const std::string dir = desc ? " descending" : "";
        out.push_back(one("f32 specials" + dir, {special},
                          [desc](Inputs x, Device) { return argsort(x[0], 0, desc); }, false));
        out.push_back(one("i32 ties (1027)" + dir, {integers({1027}, -9, 9)},
                          [desc](Inputs x, Device) { return argsort(x[0], 0, desc); }, false));
        out.push_back(one("u32 (4,33) axis 0" + dir, {integers({4, 33}, 0, 5, u32)},
                          [desc](Inputs x, Device) { return argsort(x[0], 0, desc); }, false));
        out.push_back(one("f32 (2,3,5) axis 1" + dir, {uniform({2, 3, 5}, -1, 1)},
                          [desc](Inputs x, Device) { return argsort(x[0], 1, desc); }, false));
        out.push_back(one("bool (17)" + dir, {booleans({17})},
                          [desc](Inputs x, Device) { return argsort(x[0], -1, desc); }, false));
      }
      out.push_back(one("f32 (1)", {uniform({1}, -1, 1)},
                        [](Inputs x, Device) { return argsort(x[0]); }, false));
      out.push_back(one("f32 (3,0)", {zeros({3, 0}, f32, Device::cpu())},
                        [](Inputs x, Device) { return argsort(x[0]); }, false));
      return out;
    }
    case Prim::kArgmax:
    case Prim::kArgmin: {
      using ArgReduce = Array (*)(const Array&, std::int64_t, bool);
      const ArgReduce f = p == Prim::kArgmax ? static_cast<ArgReduce>(argmax)
                                             : static_cast<ArgReduce>(argmin);
      std::vector<Case> out;
      for (DType d : kNumeric) {
        for (const Shape& s : {Shape{17}, Shape{4, 33}, Shape{1027}}) {
          for (std::int64_t axis = 0; axis < static_cast<std::int64_t>(s.size()); ++axis) {
            out.push_back(one(std::string(name(d)) + shape_text(s) + " axis " + std::to_string(axis),
                              {of(d, s, -3, 3)},  // i32 in [-21, 21]: ties, first wins
                              [f, axis](Inputs x, Device) { return f(x[0], axis, axis == 0); }));
          }
        }
      }
      return out;
    }
    case Prim::kMatmul: {
      std::vector<Case> out;
      const std::pair<Shape, Shape> shapes[] = {{{3, 4}, {4, 5}}, {{1, 17}, {17, 1}},
                                                {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
                                                {{0, 4}, {4, 3}}, {{5, 33}, {33, 7}}};
      for (const auto& [sa, sb] : shapes) {
        out.push_back(one("f32" + shape_text(sa) + shape_text(sb), {uniform(sa, -1, 1), uniform(sb, -1, 1)},
                          [](Inputs x, Device) { return matmul(x[0], x[1]); }));
      }
      return out;
    }
    case Prim::kReshape:
      return {one("(4,6)->(2,3,4)", {uniform({4, 6}, -1, 1)},
                  [](Inputs x, Device) { return reshape(x[0], {2, 3, 4}); }),
              one("(0,3)->(3,0)", {zeros({0, 3}, f32, Device::cpu())}, [](Inputs x, Device) { return reshape(x[0], {3, 0}); }),
              one("i32 (17)->(1,17)", {integers({17}, -9, 9)},
                  [](Inputs x, Device) { return reshape(x[0], {1, 17}); })};
    case Prim::kTranspose:
      return {one("(4,33)", {uniform({4, 33}, -1, 1)}, [](Inputs x, Device) { return transpose(x[0]); }),
              one("(2,3,5) perm 1,2,0", {uniform({2, 3, 5}, -1, 1)},
                  [](Inputs x, Device) { return transpose(x[0], {1, 2, 0}); }),
              one("i32 (0,3)", {zeros({0, 3}, i32, Device::cpu())}, [](Inputs x, Device) { return transpose(x[0]); }),
              one("bool (3,1,2)", {booleans({3, 1, 2})},
                  [](Inputs x, Device) { return transpose(x[0], {2, 0, 1}); })};
    case Prim::kBroadcastTo:
      return {one("(1,5)->(4,5)", {uniform({1, 5}, -1, 1)},
                  [](Inputs x, Device) { return broadcast_to(x[0], {4, 5}); }),
              one("()->(17)", {uniform({}, -1, 1)}, [](Inputs x, Device) { return broadcast_to(x[0], {17}); }),
              one("i32 (3,1)->(2,3,4)", {integers({3, 1}, -9, 9)},
                  [](Inputs x, Device) { return broadcast_to(x[0], {2, 3, 4}); }),
              one("(1)->(0)", {uniform({1}, -1, 1)}, [](Inputs x, Device) { return broadcast_to(x[0], {0}); })};
    case Prim::kConcatenate:
      return {one("3 arrays axis 0", {uniform({2, 3}, -1, 1), uniform({1, 3}, -1, 1), uniform({4, 3}, -1, 1)},
                  [](Inputs x, Device) { return concatenate(x, 0); }),
              one("axis 1 with an empty part", {uniform({2, 3}, -1, 1), uniform({2, 0}, -1, 1), uniform({2, 5}, -1, 1)},
                  [](Inputs x, Device) { return concatenate(x, 1); }),
              one("i32 1-D", {integers({17}, -9, 9), integers({1}, -9, 9)},
                  [](Inputs x, Device) { return concatenate(x, 0); })};
    case Prim::kSlice:
      return {one("(6,7) steps", {uniform({6, 7}, -1, 1)},
                  [](Inputs x, Device) { return slice(x[0], {1, 0}, {6, 7}, {2, 3}); }),
              one("(1027) tail", {uniform({1027}, -1, 1)},
                  [](Inputs x, Device) { return slice_axis(x[0], 0, 1000, 1027); }),
              one("empty", {uniform({5}, -1, 1)}, [](Inputs x, Device) { return slice_axis(x[0], 0, 3, 3); }),
              one("i32 (3,4,5)", {integers({3, 4, 5}, -9, 9)},
                  [](Inputs x, Device) { return slice(x[0], {1, 1, 1}, {3, 4, 5}, {1, 2, 2}); })};
    case Prim::kUnfold: {
      // 2-D with every option, 1-D, 3-D, integers, and a max-pool's -inf pad.
      const Window w2{.size = {3, 2}, .strides = {2, 1}, .padding = {{1, 0}, {1, 2}},
                      .dilation = {1, 2}};
      return {one("(2,3,5,6) 3x2 stride, padding, dilation, pad 0.5", {uniform({2, 3, 5, 6}, -1, 1)},
                  [w2](Inputs x, Device) { return unfold(x[0], w2, 0.5); }),
              one("(4,9) 1-D window 3 stride 2", {uniform({4, 9}, -1, 1)},
                  [](Inputs x, Device) { return unfold(x[0], {.size = {3}, .strides = {2}}); }),
              one("(1,2,4,3,5) 3-D 2x2x2 padding 1", {uniform({1, 2, 4, 3, 5}, -1, 1)},
                  [](Inputs x, Device) {
                    return unfold(x[0], {.size = {2, 2, 2}, .padding = {{1, 1}, {1, 1}, {1, 1}}});
                  }),
              one("i32 (2,7,7) 3x3 stride 3 pad -7", {integers({2, 7, 7}, -9, 9)},
                  [](Inputs x, Device) {
                    return unfold(x[0], {.size = {3, 3}, .strides = {3, 3}, .padding = {{1, 1}, {1, 1}}},
                                  -7);
                  }),
              one("(3,4,4) 2x2 stride 2 -inf padding", {uniform({3, 4, 4}, -1, 1)},
                  [](Inputs x, Device) {
                    return unfold(x[0], {.size = {2, 2}, .strides = {2, 2}, .padding = {{1, 1}, {0, 1}}},
                                  -std::numeric_limits<double>::infinity());
                  }, false)};
    }
    case Prim::kFold: {
      // Columns of the unfold cases above: overlapping taps (stride < window)
      // sum, taps in the padding drop.
      const Window w2{.size = {3, 2}, .strides = {2, 1}, .padding = {{1, 0}, {1, 2}},
                      .dilation = {1, 2}};
      return {one("(2,3,6,14) into (5,6)", {uniform({2, 3, 6, 14}, -1, 1)},
                  [w2](Inputs x, Device) { return fold(x[0], {5, 6}, w2); }),
              one("(4,3,4) 1-D into (9)", {uniform({4, 3, 4}, -1, 1)},
                  [](Inputs x, Device) { return fold(x[0], {9}, {.size = {3}, .strides = {2}}); }),
              one("f64 (2,8,120) 3-D into (4,3,5)", {uniform({2, 8, 120}, -1, 1, f64)},
                  [](Inputs x, Device) {
                    return fold(x[0], {4, 3, 5},
                                {.size = {2, 2, 2}, .padding = {{1, 1}, {1, 1}, {1, 1}}});
                  }),
              one("i32 (2,9,25) 3x3 stride 1 into (5,5)", {integers({2, 9, 25}, -9, 9)},
                  [](Inputs x, Device) {
                    return fold(x[0], {5, 5}, {.size = {3, 3}, .padding = {{1, 1}, {1, 1}}});
                  })};
    }
    case Prim::kTake:
      return {one("rows", {uniform({5, 3}, -1, 1), integers({7}, -5, 4)},
                  [](Inputs x, Device) { return take(x[0], x[1], 0); }),
              one("columns, 2-D indices", {uniform({4, 6}, -1, 1), integers({2, 3}, 0, 5)},
                  [](Inputs x, Device) { return take(x[0], x[1], 1); }),
              one("no indices", {uniform({4, 6}, -1, 1), integers({0}, 0, 3)},
                  [](Inputs x, Device) { return take(x[0], x[1], 0); }),
              one("0-d index into a vector: a scalar", {uniform({7}, -1, 1), integers({}, -7, 6)},
                  [](Inputs x, Device) { return take(x[0], x[1], 0); }),
              one("i32 values, u32 indices", {integers({9}, -9, 9), integers({4}, 0, 8, u32)},
                  [](Inputs x, Device) { return take(x[0], x[1], 0); })};
    case Prim::kTakeAlongAxis:
      return {one("axis 1", {uniform({4, 6}, -1, 1), integers({4, 2}, -6, 5)},
                  [](Inputs x, Device) { return take_along_axis(x[0], x[1], 1); }),
              one("axis 0, broadcast indices", {uniform({5, 3}, -1, 1), integers({2, 1}, 0, 4)},
                  [](Inputs x, Device) { return take_along_axis(x[0], x[1], 0); })};
    case Prim::kScatterAdd:
      // Repeated indices (7 rows into 5): sums in index order on both backends.
      return {one("rows, repeated", {uniform({5, 3}, -1, 1), integers({7}, -5, 4), uniform({7, 3}, -1, 1)},
                  [](Inputs x, Device) { return scatter_add(x[0], x[1], x[2], 0); }),
              one("columns, 2-D indices", {uniform({4, 6}, -1, 1), integers({2, 3}, 0, 5),
                                           uniform({4, 2, 3}, -1, 1)},
                  [](Inputs x, Device) { return scatter_add(x[0], x[1], x[2], 1); }),
              one("no indices", {uniform({4, 6}, -1, 1), integers({0}, 0, 3), uniform({0, 6}, -1, 1)},
                  [](Inputs x, Device) { return scatter_add(x[0], x[1], x[2], 0); }),
              one("i32 values, u32 indices", {integers({9}, -9, 9), integers({40}, 0, 8, u32),
                                              integers({40}, -9, 9)},
                  [](Inputs x, Device) { return scatter_add(x[0], x[1], x[2], 0); }),
              one("f64, middle axis", {uniform({2, 5, 3}, -1, 1, f64), integers({6}, -5, 4),
                                       uniform({2, 6, 3}, -1, 1, f64)},
                  [](Inputs x, Device) { return scatter_add(x[0], x[1], x[2], 1); })};
    case Prim::kScatter:
      return {one("rows, repeated (the last wins)",
                  {uniform({5, 3}, -1, 1), integers({7}, -5, 4), uniform({7, 3}, -1, 1)},
                  [](Inputs x, Device) { return scatter(x[0], x[1], x[2], 0); }),
              one("columns", {uniform({4, 6}, -1, 1), integers({3}, 0, 5), uniform({4, 3}, -1, 1)},
                  [](Inputs x, Device) { return scatter(x[0], x[1], x[2], 1); }),
              one("bool", {booleans({6}), integers({4}, 0, 5), booleans({4})},
                  [](Inputs x, Device) { return scatter(x[0], x[1], x[2], 0); })};
    case Prim::kScatterAddAlongAxis:
      return {one("axis 1", {uniform({4, 6}, -1, 1), integers({4, 9}, -6, 5), uniform({4, 9}, -1, 1)},
                  [](Inputs x, Device) { return scatter_add_along_axis(x[0], x[1], x[2], 1); }),
              one("axis 0, u32", {uniform({5, 3}, -1, 1), integers({2, 3}, 0, 4, u32),
                                  uniform({2, 3}, -1, 1)},
                  [](Inputs x, Device) { return scatter_add_along_axis(x[0], x[1], x[2], 0); }),
              one("i32", {integers({3, 4}, -9, 9), integers({3, 4}, 0, 3), integers({3, 4}, -9, 9)},
                  [](Inputs x, Device) { return scatter_add_along_axis(x[0], x[1], x[2], 1); })};
    case Prim::kOneHot:
      return {one("i32 (7) depth 5, out of range rows", {integers({7}, -2, 6)},
                  [](Inputs x, Device) { return one_hot(x[0], 5); }, false),
              one("u32 (2,3) depth 4 as i32", {integers({2, 3}, 0, 4, u32)},
                  [](Inputs x, Device) { return one_hot(x[0], 4, i32); }, false)};
    case Prim::kFull:
      return {one("f32 (4,33)", {}, [](Inputs, Device d) { return full({4, 33}, -0.5, f32, d); }),
              one("i32 ()", {}, [](Inputs, Device d) { return full({}, 7, i32, d); }),
              one("bool (0)", {}, [](Inputs, Device d) { return full({0}, 1, DType::kBool, d); })};
    case Prim::kArange:
      return {one("i32 0..17", {}, [](Inputs, Device d) { return on_default(d, [] { return arange(17); }); }),
              one("f32 -1..2 step 0.25", {}, [](Inputs, Device d) {
                return on_default(d, [] { return arange(-1, 2, 0.25, f32); });
              })};
    case Prim::kStopGradient:
      return {one("f32 (17)", {uniform({17}, -1, 1)}, [](Inputs x, Device) { return stop_gradient(x[0]); }),
              one("i32 (4,33)", {integers({4, 33}, -9, 9)},
                  [](Inputs x, Device) { return stop_gradient(x[0]); })};
    // Control flow (dsl/control.hpp): each case's op returns one array built
    // from all of the construct's results.
    case Prim::kScanLoop: {
      const auto rnn = [](bool reverse) {
        return [reverse](Inputs x, Device) {
          const Array& w = x[2];
          auto [h, ys] = scan(
              [&](const Array& c, const Array& xt) {
                const Array n = tanh(c * w + xt);
                return std::pair{n, n * 2.0};
              },
              x[0], x[1], std::nullopt, reverse);
          return concatenate({reshape(ys, {ys.size()}), h}, 0);
        };
      };
      const auto rnn_inputs = [](std::int64_t n) {
        return std::vector<Array>{uniform({3}, -1, 1), uniform({n, 3}, -1, 1), uniform({3}, -1, 1)};
      };
      return {one("tanh rnn, 5 steps", rnn_inputs(5), rnn(false)),
              one("reverse", rnn_inputs(4), rnn(true)),
              one("length 0", rnn_inputs(0), rnn(false)),
              one("i32 and f32 carry (tuple)", {integers({}, 0, 5), uniform({4, 2}, -1, 1)},
                  [](Inputs x, Device) {
                    using C = std::tuple<Array, Array>;
                    auto [c, ys] = scan(
                        [](const C& c, const Array& xt) {
                          const auto& [k, s] = c;
                          return std::pair{C{k + ones_like(k), s + xt * astype(k, f32)}, k};
                        },
                        C{x[0], zeros({2}, f32, x[1].device())}, x[1]);
                    return std::get<1>(c) + astype(sum(ys), f32);
                  })};
    }
    case Prim::kWhileLoop:
      return {one("f32 grow until sum >= 50", {uniform({4}, 0.5, 1)},
                  [](Inputs x, Device) {
                    return while_loop([](const Array& c) { return sum(c) < 50.0; },
                                      [](const Array& c) { return c * 1.5 + 0.25; }, x[0]);
                  }),
              one("i32 counter, zero trips possible", {integers({}, 0, 9), integers({3}, -9, 9)},
                  [](Inputs x, Device) {
                    using C = std::tuple<Array, Array>;
                    const C r = while_loop(
                        [](const C& c) { return std::get<0>(c) < 6; },
                        [](const C& c) {
                          return C{std::get<0>(c) + 1, std::get<1>(c) * 2 - std::get<0>(c)};
                        },
                        C{x[0], x[1]});
                    return std::get<1>(r) + std::get<0>(r);
                  })};
    case Prim::kCond: {
      const auto pick = [](Inputs x, Device) {
        return cond(sum(x[0]) > 0.0, [](const Array& v) { return v * 2.0 + 1.0; },
                    [](const Array& v) { return sin(v) * v; }, x[0]);
      };
      return {one("true branch", {uniform({5}, 0.2, 1)}, pick),
              one("false branch", {uniform({5}, -1, -0.2)}, pick),
              one("switch, index clamped", {uniform({2, 3}, -1, 1), integers({}, -3, 5)},
                  [](Inputs x, Device) {
                    return switch_case(
                        x[1], x[0], [](const Array& v) { return v * 3.0; },
                        [](const Array& v) { return exp(v); }, [](const Array& v) { return -v; });
                  })};
    }
    case Prim::kCall:
      return {one("checkpointed layer", {uniform({4, 3}, -1, 1), uniform({3, 2}, -1, 1)},
                  [](Inputs x, Device) {
                    const auto layer = checkpoint(
                        [](const Array& a, const Array& w) { return tanh(matmul(a, w)) * a.shape()[1]; });
                    return layer(x[0], x[1]);
                  })};
    case Prim::kCustomVjp:
      // A hand-written gradient equal to the true one (the harness checks it
      // against finite differences).
      return {one("sin(x) * w, cos saved", {uniform({6}, -2, 2), uniform({6}, -1, 1)},
                  [](Inputs x, Device) {
                    const auto f = custom_vjp(
                        [](const Array& a, const Array& w) { return sin(a) * w; },
                        [](const Array& a, const Array& w) {
                          return std::pair{sin(a) * w, std::tuple{cos(a), sin(a), w}};
                        },
                        [](const std::tuple<Array, Array, Array>& r, const Array& g) {
                          const auto& [c, sn, w] = r;
                          return std::tuple{g * c * w, g * sn};
                        });
                    return f(x[0], x[1]);
                  })};
  }
  return {};
}

// ---- comparison ----

std::vector<double> as_doubles(const Array& a) {
  std::vector<double> out;
  const Array h = to_device(a, Device::cpu());
  switch (h.dtype()) {
    case DType::kF32: for (float v : h.to_vector<float>()) out.push_back(v); break;
    case DType::kF64: out = h.to_vector<double>(); break;
    case DType::kI32: for (auto v : h.to_vector<std::int32_t>()) out.push_back(v); break;
    case DType::kU32: for (auto v : h.to_vector<std::uint32_t>()) out.push_back(v); break;
    case DType::kBool:
      for (auto v : astype(h, i32).to_vector<std::int32_t>()) out.push_back(v);
      break;
    default: FAIL("unexpected dtype ", name(h.dtype()));
  }
  return out;
}

// "" when equal (within `rel` for floats; rel 0: bit for bit but -0 == 0 and NaN == NaN).
std::string compare(const Array& got, const Array& want, double rel) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return detail::str_cat("aval ", name(got.dtype()), shape_text(got.shape()), " vs ",
                           name(want.dtype()), shape_text(want.shape()));
  }
  const std::vector<double> g = as_doubles(got), w = as_doubles(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (g[i] == w[i]) continue;  // infinities too
    const double tol = rel * std::max(1.0, std::abs(w[i]));
    if (!(std::abs(g[i] - w[i]) <= tol)) {
      return detail::str_cat("element ", i, ": ", g[i], " vs ", w[i]);
    }
  }
  return "";
}

std::vector<Array> on(Device d, const std::vector<Array>& xs) {
  std::vector<Array> out;
  for (const Array& x : xs) out.push_back(to_device(x, d));
  return out;
}

// The same elements in reverse order, same dtype and shape: the second inputs
// of a compiled case (a cache hit must compute on its own inputs, whatever the
// first call prepared and kept). Index inputs stay in range.
Array reversed(const Array& x) {
  const Array h = to_device(x, Device::cpu());
  const std::size_t esize = size_of(h.dtype()), n = static_cast<std::size_t>(h.size());
  std::vector<unsigned char> bytes(n * esize);
  h.read_bytes(bytes.data());
  auto buf = HostBuffer::allocate(bytes.size());
  auto* dst = static_cast<unsigned char*>(buf->host_data());
  for (std::size_t i = 0; i < n; ++i) {
    std::copy_n(bytes.data() + (n - 1 - i) * esize, esize, dst + i * esize);
  }
  return to_device(Array(h.dtype(), h.shape(), std::move(buf)), x.device());
}

// An identity that is its own fused equation, so that the op under test joins
// a fused group (exact: double negation, double not).
Array identity_step(const Array& x) {
  if (x.dtype() == DType::kBool) return logical_not(logical_not(x));
  if (x.dtype() == u32) return bitwise_not(bitwise_not(x));
  return neg(neg(x));
}

bool elementwise(Prim p) {
  switch (family(p)) {
    case PrimFamily::kUnary: case PrimFamily::kBinary: case PrimFamily::kWhere:
    case PrimFamily::kAstype: case PrimFamily::kIdentity:
      return true;
    default:
      return false;
  }
}

bool binds(Prim p, const Case& c) {
  Trace t;
  std::vector<Array> xs;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    xs.push_back(t.input(c.inputs[i].aval(), Device::cpu(), "x" + std::to_string(i)));
  }
  const Array out = c.op(xs, Device::cpu());
  const Program prog = t.finish(std::span<const Array>(&out, 1));
  return std::any_of(prog.equations.begin(), prog.equations.end(),
                     [&](const Equation& e) { return e.prim == p; });
}

// The vjp of output-weighted sum against central differences, for each float
// input, in f64 where the op takes f64 (else f32 with a looser tolerance).
void check_vjp(Prim p, const Case& c, Device device) {
  for (std::size_t k = 0; k < c.inputs.size(); ++k) {
    if (c.inputs[k].dtype() != f32 || c.inputs[k].size() == 0) continue;
    bool wide = true;
    auto inputs_as = [&](DType d) {
      std::vector<Array> xs = on(device, c.inputs);
      for (Array& x : xs) {
        if (x.dtype() == f32) x = astype(x, d);
      }
      return xs;
    };
    std::vector<Array> xs;
    Array w;
    auto loss = [&](const Array& xk) {
      std::vector<Array> args = xs;
      args[k] = xk;
      const Array y = c.op(args, device);
      return sum(y * w);
    };
    try {
      xs = inputs_as(f64);
      const Array y = c.op(xs, device);
      if (y.dtype() != f64) return;  // not a float output: no gradient to check
      w = to_device(uniform(y.shape(), -1, 1, f64), device);
    } catch (const DTypeError&) {
      wide = false;
      xs = inputs_as(f32);
      w = to_device(uniform(c.op(xs, device).shape(), -1, 1, f32), device);
    }
    const Array g = grad(loss)(xs[k]);
    const std::vector<double> gv = as_doubles(g);
    const std::vector<double> x0 = as_doubles(xs[k]);
    const double eps = wide ? 1e-6 : 1e-2;
    const double tol = wide ? 1e-5 : 5e-2;
    const std::size_t n = x0.size();
    const std::size_t stride = std::max<std::size_t>(1, n / 6);
    for (std::size_t i = 0; i < n; i += stride) {
      auto at = [&](double delta) {
        std::vector<double> v = x0;
        v[i] += delta;
        Array xi = Array::from_data<double>(v, xs[k].shape());
        if (!wide) xi = astype(xi, f32);
        return as_doubles(loss(to_device(xi, device)))[0];
      };
      const double fd = (at(eps) - at(-eps)) / (2 * eps);
      INFO(name(p), " ", c.label, ": d/d input ", k, "[", i, "]");
      CHECK(gv[i] == doctest::Approx(fd).epsilon(tol).scale(1.0));
    }
  }
}

// vmap of the case's op over two examples (the inputs, and the float ones
// scaled by 0.75) against the op on each example: every input batched, and
// (with several inputs) only the first, the others shared. Checks the
// primitive's batching rule (dsl/vmap.cpp).
void check_vmap(const Case& c, Device device) {
  if (c.inputs.empty()) return;  // creation: nothing to map over
  const std::vector<Array> x1 = on(device, c.inputs);
  std::vector<Array> x2, stacked;
  for (const Array& x : x1) {
    x2.push_back(is_inexact(x.dtype()) ? x * 0.75 : x);
    stacked.push_back(stack({x, x2.back()}));
  }
  const auto flat = [&](std::span<const Array> xs) {
    return std::vector<Array>{c.op(xs, device)};
  };
  const std::vector<std::string> names(x1.size(), "x");
  const auto run = [&](const std::vector<std::optional<std::int64_t>>& axes,
                       const std::vector<Array>& second) {
    std::vector<Array> leaves;
    for (std::size_t i = 0; i < x1.size(); ++i) leaves.push_back(axes[i] ? stacked[i] : x1[i]);
    const Array got = detail::vmap_flat(flat, leaves, axes, names)[0];
    const Array want = stack({c.op(x1, device), c.op(second, device)});
    const double tol = is_inexact(want.dtype()) ? 1e-5 : 0.0;
    CHECK_MESSAGE(compare(got, want, tol) == "", "vmap vs per example: ", compare(got, want, tol));
  };
  run(std::vector<std::optional<std::int64_t>>(x1.size(), 0), x2);
  if (x1.size() > 1) {
    std::vector<std::optional<std::int64_t>> axes(x1.size(), std::nullopt);
    axes[0] = 0;
    std::vector<Array> second = x1;
    second[0] = x2[0];
    run(axes, second);
  }
}

}  // namespace

TEST_CASE("every primitive of the table: bound by its op, device vs CPU, jit fused vs unfused, vjp vs finite differences") {
  const Device dut = default_device();
  const bool is_cpu = dut == Device::cpu();
  std::size_t total = 0;
  for (const PrimInfo& info : all_prims()) {
    const Prim p = info.prim;
    const std::vector<Case> cases = cases_for(p);
    INFO("primitive ", info.name);
    REQUIRE(!cases.empty());
    CHECK(binds(p, cases.front()));
    // Float kernels may differ from the CPU's in the last bits (transcendentals,
    // summation order); everything else must be exact.
    const double rel = is_cpu ? 0.0 : 1e-5;
    for (const Case& c : cases) {
      ++total;
      INFO("case ", c.label);
      const Array want = c.op(c.inputs, Device::cpu());
      const std::vector<Array> xs = on(dut, c.inputs);
      const Array got = c.op(xs, dut);
      CHECK(got.device() == dut);
      const double tol = is_inexact(want.dtype()) ? rel : 0.0;
      CHECK_MESSAGE(compare(got, want, tol) == "", compare(got, want, tol));

      // Compiled, with the op's inputs produced by a fused identity step.
      auto body = [op = c.op, dut](const std::vector<Array>& in) {
        std::vector<Array> prepped;
        for (const Array& x : in) prepped.push_back(identity_step(x));
        return op(prepped, dut);
      };
      auto unfused = filter_jit(body, {.name = std::string(info.name), .fusion = {.enabled = false}});
      auto fused = filter_jit(body, {.name = std::string(info.name)});
      const Array u = unfused(xs);
      const Array f = fused(xs);
      CHECK_MESSAGE(compare(u, got, 0.0) == "", "unfused vs eager: ", compare(u, got, 0.0));
      // Elementwise fusion is exact; fused reduction prologues and matmul
      // epilogues may add in another order.
      const double fused_tol = elementwise(p) || !is_inexact(want.dtype()) ? 0.0 : 1e-5;
      CHECK_MESSAGE(compare(f, u, fused_tol) == "", "fused vs unfused: ", compare(f, u, fused_tol));
      // A second call (a cache hit: kept plans and launches) on other values.
      std::vector<Array> xs2;
      for (const Array& x : xs) xs2.push_back(reversed(x));
      const Array got2 = c.op(xs2, dut);
      const Array u2 = unfused(xs2);
      const Array f2 = fused(xs2);
      CHECK(unfused.trace_count() == 1);
      CHECK(fused.trace_count() == 1);
      CHECK_MESSAGE(compare(u2, got2, 0.0) == "", "unfused hit vs eager: ", compare(u2, got2, 0.0));
      CHECK_MESSAGE(compare(f2, u2, fused_tol) == "", "fused hit vs unfused: ",
                    compare(f2, u2, fused_tol));

      if (has_trait(p, PrimTrait::kDifferentiable) && c.grad) check_vjp(p, c, dut);
      check_vmap(c, dut);
    }
  }
  MESSAGE(total, " cases over ", all_prims().size(), " primitives on ", dut.to_string());
}

// ---- f16 and bf16 ----

namespace {

// Whether a primitive's f32 cases have 16-bit float twins (f16 and bf16 alike):
// every primitive of a family whose ops take any floating dtype, unless it is
// integer-only. Conversions (astype, bitcast) pair given dtypes (and make the
// 16-bit inputs here); creation has no inputs. No default: a new family must say.
bool takes_16bit_float(Prim p) {
  if (has_trait(p, PrimTrait::kIntegerOnly)) return false;
  switch (family(p)) {
    case PrimFamily::kUnary: case PrimFamily::kBinary: case PrimFamily::kWhere:
    case PrimFamily::kReduce: case PrimFamily::kArgReduce: case PrimFamily::kScan:
    case PrimFamily::kSort: case PrimFamily::kLayout: case PrimFamily::kIndex: case PrimFamily::kWindow:
    case PrimFamily::kIdentity: case PrimFamily::kMatmul:
      return true;
    case PrimFamily::kAstype: case PrimFamily::kCreation: case PrimFamily::kControl:
      return false;
  }
  return false;
}

const DeviceInfo& info_of(Device d) {
  static const std::vector<DeviceInfo> all = devices();
  for (const DeviceInfo& i : all) {
    if (i.device == d) return i;
  }
  FAIL("no DeviceInfo for ", d.to_string());
  return all.front();
}

// The device computes a 16-bit float in f32 and rounds each stored result to
// it (half an ulp: at most 2^-11 relative for f16, 2^-8 for bf16, whose
// mantissa has 7 bits). f16 allows two such roundings; bf16 one (3.9e-3) plus
// the devices' f32 differences, since the reference gets the same rounded
// inputs and each case is one primitive (all 400 cases pass on the CPU and
// lavapipe at that).
constexpr double kF16Tolerance = 1e-3;
constexpr double kBF16Tolerance = 4e-3;

// Every f32 case of every primitive that takes_16bit_float, its f32 inputs
// rounded to `half` on the device, against the CPU on the same values in f32,
// eager and fused (after an identity step, so that the rounded intermediates
// are checked too). Returns the number of primitives covered.
std::size_t check_16bit_twins(DType half, double tol_16) {
  const Device dut = default_device();
  std::size_t total = 0, prims = 0;
  for (const PrimInfo& info : all_prims()) {
    const Prim p = info.prim;
    if (!takes_16bit_float(p)) continue;
    bool any = false;
    for (const Case& c : cases_for(p)) {
      if (std::none_of(c.inputs.begin(), c.inputs.end(), [](const Array& x) { return x.dtype() == f32; })) {
        continue;
      }
      any = true;
      ++total;
      INFO("primitive ", info.name, " case ", c.label, " in ", name(half));
      // f32 inputs rounded on the device; the reference gets the same values
      // back in f32.
      std::vector<Array> narrow, exact;
      for (const Array& x : c.inputs) {
        if (x.dtype() == f32) {
          narrow.push_back(astype(to_device(x, dut), half));
          exact.push_back(to_device(astype(narrow.back(), f32), Device::cpu()));
        } else {
          narrow.push_back(to_device(x, dut));
          exact.push_back(x);
        }
      }
      const Array want = c.op(exact, Device::cpu());
      const Array got = c.op(narrow, dut);
      const bool inexact = want.dtype() == f32;
      CHECK(got.dtype() == (inexact ? half : want.dtype()));
      const Array got32 = inexact ? astype(got, f32) : got;
      const double tol = inexact ? tol_16 : 0.0;
      CHECK_MESSAGE(compare(got32, want, tol) == "", compare(got32, want, tol));
      // Fused, after an identity step: 16-bit intermediates round as stored.
      auto body = [op = c.op, dut](const std::vector<Array>& in) {
        std::vector<Array> prepped;
        for (const Array& x : in) prepped.push_back(identity_step(x));
        return op(prepped, dut);
      };
      const std::string jit_name = detail::str_cat(info.name, "_", name(half));
      const Array f = filter_jit(body, {.name = jit_name})(narrow);
      const Array f32v = inexact ? astype(f, f32) : f;
      // The CPU rounds each fused result as eager stores it: the same bits.
      const double fused_tol = dut == Device::cpu() ? 0.0 : tol;
      CHECK_MESSAGE(compare(f32v, got32, fused_tol) == "", "fused vs eager: ",
                    compare(f32v, got32, fused_tol));
    }
    prims += any ? 1 : 0;
  }
  MESSAGE(total, " ", name(half), " cases over ", prims, " primitives on ", dut.to_string());
  return prims;
}

}  // namespace

TEST_CASE("f16: every primitive of a float-taking family, on the device against the CPU in f32") {
  // On the CPU too: it stores f16 and computes each primitive in f32
  // (backends/cpu/half.cpp), so the same cases check it against its own f32.
  const Device dut = default_device();
  if (!info_of(dut).f16) {
    MESSAGE("f16 cases skipped: ", dut.to_string(), " has no f16 storage");
    return;
  }
  CHECK(check_16bit_twins(f16, kF16Tolerance) > 0);
}

TEST_CASE("bf16: every primitive of a float-taking family, on the device against the CPU in f32") {
  // The same twins in bf16: stored as 16-bit words (u16 on Vulkan), computed
  // in f32, each result rounded once to nearest even.
  const Device dut = default_device();
  if (!info_of(dut).bf16) {
    MESSAGE("bf16 cases skipped: ", dut.to_string(), " has no bf16 (KILN_VK_DISABLE_BF16?)");
    return;
  }
  CHECK(check_16bit_twins(bf16, kBF16Tolerance) > 0);
}

// ---- arrays past 128 MiB ----

namespace {

// Just past the 2^27 bytes that Vulkan guarantees one storage buffer can
// address (maxStorageBufferRange): the Vulkan backend reaches such arrays
// through their device addresses (bufferDeviceAddress), and refuses them,
// naming the limit, without it. A device whose range is larger still runs
// the cases.
constexpr std::int64_t kBigBytes = std::int64_t{1} << 27;
constexpr std::int64_t kCols = 256;
constexpr std::int64_t kBigRows = kBigBytes / 4 / kCols + 7;  // f32 [rows, 256] > 128 MiB

// On the CPU: an arange folded into [-1, 1] by sin, cheap to make, with
// neighbours distinct enough that a misplaced element shows.
Array big_uniform(const Shape& shape) {
  return on_default(Device::cpu(), [&] {
    const Array i = astype(reshape(arange(numel(shape)), shape), f32);
    return sin(i * 0.7548776662466927);
  });
}

// "" when got (any device) equals want (CPU) within `rel` of max(1, |want|),
// compared on the CPU without copying to doubles.
std::string compare_big(const Array& got_dev, const Array& want, double rel) {
  const Array got = to_device(got_dev, Device::cpu());
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return compare(got, want, rel);
  if (rel == 0.0 || !is_inexact(want.dtype())) {
    return all(equal(got, want)).item<bool>() ? "" : "values differ";
  }
  const Array excess = abs(got - want) - maximum(abs(want), 1.0) * rel;
  const float worst = max(excess).item<float>();
  return worst <= 0.0f ? "" : detail::str_cat("off by up to ", worst, " past the tolerance");
}

}  // namespace

TEST_CASE("arrays past 128 MiB: a few primitives per family on the device against the CPU") {
  const Device dut = default_device();
  if (dut == Device::cpu()) {
    MESSAGE("the CPU is the reference: nothing to compare");
    return;
  }
  const Shape big{kBigRows, kCols};
  try {
    (void)zeros(big, f32, dut);
  } catch (const OutOfMemoryError& e) {
    // Without bufferDeviceAddress (KILN_VK_DISABLE_BUFFER_ADDRESS=1) or a
    // larger range, such an array is refused up front, naming the limit.
    const std::string what = e.what();
    CHECK(what.find("maxStorageBufferRange") != std::string::npos);
    CHECK(what.find("bufferDeviceAddress") != std::string::npos);
    MESSAGE("refused: ", what);
    return;
  }
  const Array hx = big_uniform(big);
  REQUIRE(static_cast<std::int64_t>(hx.nbytes()) > kBigBytes);
  const Array x = to_device(hx, dut);
  // One input for all (each SUBCASE would build it again); a block per family.
  {  // binary: add, broadcasting a row
    const Array hb = big_uniform({kCols}) * 3.0;
    CHECK(compare_big(x + to_device(hb, dut), hx + hb, 0.0) == "");
  }
  {  // reduce: sum per row and over everything
    CHECK(compare_big(sum(x, 1), sum(hx, 1), 1e-5) == "");
    CHECK(compare_big(sum(x), sum(hx), 1e-3) == "");
  }
  {  // index: take rows near the end, scatter_add into the big array
    const Array idx = Array::from_data<std::int32_t>(
        std::vector<std::int32_t>{static_cast<std::int32_t>(kBigRows - 1), 0, -2,
                                  static_cast<std::int32_t>(kBigRows / 2), -1},
        {5});
    CHECK(compare_big(take(x, to_device(idx, dut), 0), take(hx, idx, 0), 0.0) == "");
    const Array hu = big_uniform({5, kCols});
    CHECK(compare_big(scatter_add(x, to_device(idx, dut), to_device(hu, dut), 0),
                      scatter_add(hx, idx, hu, 0), 0.0) == "");
  }
  {  // layout: transpose, and concatenate past the first range
    CHECK(compare_big(transpose(x), transpose(hx), 0.0) == "");
    const Array tail = slice_axis(hx, 0, kBigRows - 3, kBigRows);
    CHECK(compare_big(concatenate({to_device(tail, dut), x}, 0), concatenate({tail, hx}, 0), 0.0) == "");
  }
}
